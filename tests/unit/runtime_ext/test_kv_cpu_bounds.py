"""Every C8 KV call on the CPU checks its locations before it touches memory at one: a location
outside its range (negative ones too) raises IndexError naming the range, on the compiled builds
and on the reference path alike, and a store or a residual call writes nothing first. The
residual side buffer's own indices (keys, slots, counts) are checked where the compiled calls use
them. Run under AddressSanitizer too (``test_kv_cpu_asan.py``): there, a check that let a bad
location through would be a reported heap overflow, not just a missing exception."""

from __future__ import annotations

import pytest
import torch

from runtime_ext.ops import kv_cpu
from tests.unit.runtime_ext.kv_cpu_builds import BUILDS, took, use_build

SIZE, H, D = 40, 3, 80
BAD = [SIZE, SIZE + 1, -1, -SIZE, 2**40, -(2**62)]
KEY_ROWS = 2**31 // H  # locations whose residual keys loc * H + h fit in int32


@pytest.fixture(params=[*BUILDS, "reference"])
def build(request, monkeypatch):
    use_build(request.param, monkeypatch)
    return "reference" if request.param == "reference" else "native"


def _pool():
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(-127, 128, (SIZE, H, D), dtype=torch.int8, generator=gen)
    return q, torch.rand(SIZE, H, generator=gen).half(), torch.rand(H, D, generator=gen) + 0.01


def _locs(bad: int) -> torch.Tensor:
    return torch.tensor([3, 0, SIZE - 1, bad, 7])


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_read_outside_the_pool_raises(bad, dtype, build):
    q, scales, static = _pool()
    with took(build):
        with pytest.raises(IndexError, match=rf"location {bad} is outside the pool's rows \[0, {SIZE}\)"):
            kv_cpu.gather_dequantize_per_token(q, scales, _locs(bad).reshape(1, -1), dtype)
        with pytest.raises(IndexError, match=rf"location {bad} is outside the pool's rows \[0, {SIZE}\)"):
            kv_cpu.gather_dequantize_static(q, static, _locs(bad), dtype)


@pytest.mark.parametrize("bad", BAD)
def test_a_store_outside_the_pool_raises_and_writes_nothing(bad, build):
    _, _, static = _pool()
    x = torch.randn(5, H, D, dtype=torch.bfloat16)
    buf, scales = torch.zeros(SIZE, H, D, dtype=torch.int8), torch.zeros(SIZE, H, dtype=torch.float16)
    with took(build):
        with pytest.raises(IndexError, match=rf"outside the pool's rows \[0, {SIZE}\)"):
            kv_cpu.store_per_token(buf, scales, _locs(bad), x)
        with pytest.raises(IndexError, match=rf"outside the pool's rows \[0, {SIZE}\)"):
            kv_cpu.store_static(buf, static, _locs(bad), x)
    assert not bool(buf.any()) and not bool(scales.any())


def test_a_store_whose_tokens_do_not_match_its_locations_is_the_reference(monkeypatch):
    """One token for three locations: the compiled call would read past ``x``; the reference's
    indexing broadcasts it (as ``buf[loc] = q`` does), so the call goes there."""
    use_build("native", monkeypatch)
    _, _, static = _pool()
    buf = torch.zeros(SIZE, H, D, dtype=torch.int8)
    with took("reference"):
        kv_cpu.store_static(buf, static, torch.tensor([1, 2, 3]), torch.ones(1, H, D))
    assert torch.equal(buf[1], buf[3]) and bool(buf[1].any())


def _side(dim: int = D):
    from runtime_ext.kv_cache.residual import ResidualSlots

    side = ResidualSlots(16, H, dim, tau=0.02, device="cpu")
    x = torch.randn(4, H, dim)
    side.store(torch.tensor([2, 5, 9, 11]), x, torch.zeros_like(x))  # every vector an outlier
    assert side.used == 12
    return side


def _snapshot(side) -> list[torch.Tensor]:
    return [t.clone() for t in side._state()]


def _unchanged(side, before) -> bool:
    return all(torch.equal(a, b) for a, b in zip(side._state(), before))


@pytest.mark.parametrize("bad", [-1, -(2**40), KEY_ROWS, 2**40])
def test_residual_calls_outside_the_key_range_raise_and_change_nothing(bad, build):
    side, values = _side(), torch.zeros(5, H, D)
    before, locs = _snapshot(side), _locs(bad)
    what = rf"outside the locations residual keys can name \[0, {KEY_ROWS}\)"
    with took(build):
        with pytest.raises(IndexError, match=what):
            kv_cpu.residual_add(values, locs, side.keys, side.slots, side.packed, side.scale)
        with pytest.raises(IndexError, match=what):
            kv_cpu.residual_release(*side._state()[:4], H, locs)
        with pytest.raises(IndexError, match=what):
            kv_cpu.residual_store(*side._state(), H, side.tau, locs, torch.ones(5, H, D), torch.zeros(5, H, D))
    assert _unchanged(side, before) and not bool(values.any())


@pytest.mark.parametrize("build", BUILDS, indirect=True)
@pytest.mark.parametrize("corrupt", ["slot past capacity", "negative slot", "unsorted keys", "negative key"])
def test_residual_add_refuses_keys_and_slots_outside_its_arrays(corrupt, build):
    side, values = _side(), torch.zeros(4, H, D)
    keys, slots = side.keys.clone(), side.slots.clone()
    if corrupt == "slot past capacity":
        slots[3] = side.capacity
    elif corrupt == "negative slot":
        slots[0] = -1
    elif corrupt == "unsorted keys":
        keys[4], keys[5] = keys[5].item(), keys[4].item()
    else:
        keys[0] = -3
    with took("native"), pytest.raises(IndexError, match="side buffer's keys, slots or counts"):
        kv_cpu.residual_add(values, torch.tensor([2, 5, 9, 11]), keys, slots, side.packed, side.scale)
    assert not bool(values.any())


@pytest.mark.parametrize("build", BUILDS, indirect=True)
@pytest.mark.parametrize("corrupt", ["used past the arrays", "free past the arrays", "negative count"])
def test_residual_release_and_store_refuse_counts_outside_their_arrays(corrupt, build):
    side = _side()
    counts = {"used past the arrays": (17, 0), "free past the arrays": (12, 5), "negative count": (-1, 4)}[corrupt]
    side.counts[0], side.counts[1] = counts
    before, x = _snapshot(side), torch.randn(1, H, D)
    with took("native"):
        with pytest.raises(IndexError, match="side buffer's keys, slots or counts"):
            kv_cpu.residual_release(*side._state()[:4], H, torch.tensor([5]))
        with pytest.raises(IndexError, match="side buffer's keys, slots or counts"):
            kv_cpu.residual_store(*side._state(), H, side.tau, torch.tensor([30]), x, torch.zeros_like(x))
    assert _unchanged(side, before)


@pytest.mark.parametrize("build", BUILDS, indirect=True)
def test_residual_store_refuses_a_free_slot_past_its_capacity(build):
    side = _side()
    side._free[int(side.counts[1]) - 1] = side.capacity  # the slot the next outlier would take
    before, x = _snapshot(side), torch.randn(1, H, D)
    with took("native"), pytest.raises(IndexError, match="side buffer's keys, slots or counts"):
        kv_cpu.residual_store(*side._state(), H, side.tau, torch.tensor([30]), x, torch.zeros_like(x))
    assert _unchanged(side, before)

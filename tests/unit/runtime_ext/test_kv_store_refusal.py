"""A C8 store never keeps what it cannot represent, and says which tokens it refused: a token with a
NaN or inf, or (C8-D) one whose float16 scale would overflow, is stored as zeros with scale 0 (never
an ``inf`` scale) and named in the returned mask, on every implementation (reference, both compiled
builds, the NPU path under the torch_npu emulation); the compiled store equals the reference's.
The NPU store makes no host sync; ``PoisonedRows`` marks, finds and clears the refused locations."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from runtime_ext.kv_cache.poison import PoisonedRows
from runtime_ext.ops import kv_cpu, kv_npu, kv_ref
from tests.unit.runtime_ext import npu_emulation
from tests.unit.runtime_ext.kv_cpu_builds import BUILDS, took, use_build

SIZE, H, D = 64, 2, 80  # 80: the compiled loops' vector tail too
NAN_AT, INF_AT, HUGE_AT = 3, 7, 11


def tokens(dtype=torch.float32):
    x = torch.randn(16, H, D, generator=torch.Generator().manual_seed(1)).to(dtype)
    x[NAN_AT, 1, 5] = float("nan")
    x[INF_AT, 0, 0] = float("-inf")
    x[HUGE_AT, 1, 2] = 2e7  # absmax / 127 > 65504: a float16 scale would be inf
    return x, torch.randperm(SIZE, generator=torch.Generator().manual_seed(2))[:16]


def buffers():
    return torch.zeros(SIZE, H, D, dtype=torch.int8), torch.zeros(SIZE, H, dtype=torch.float16)


def expected_per_token(x, loc):
    """What a store must leave: the refused tokens' rows zero, the others as the reference quantizes them."""
    clean = x.clone()
    clean[[NAN_AT, INF_AT, HUGE_AT]] = 0
    buf, scales = buffers()
    assert kv_ref.store_per_token(buf, scales, loc, clean) is None
    return buf, scales


def test_unstorable_rows_names_non_finite_tokens_and_float16_scale_overflow():
    x, _ = tokens()
    assert kv_ref.unstorable_rows(x, True).nonzero().flatten().tolist() == [NAN_AT, INF_AT, HUGE_AT]
    assert kv_ref.unstorable_rows(x, False).nonzero().flatten().tolist() == [NAN_AT, INF_AT]  # static: clamped
    ok = torch.full((2, H, D), 8.3e6 * 0.99)  # just below the overflow: stored
    assert not bool(kv_ref.unstorable_rows(ok, True).any())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_reference_store_zeroes_refused_tokens_and_reports_them(dtype):
    x, loc = tokens(dtype)
    buf, scales = buffers()
    bad = kv_ref.store_per_token(buf, scales, loc, x)
    assert bad.nonzero().flatten().tolist() == [NAN_AT, INF_AT, HUGE_AT]
    assert bool(torch.isfinite(scales).all())  # no inf scale, ever
    want_buf, want_scales = expected_per_token(x, loc)
    assert torch.equal(buf, want_buf) and torch.equal(scales, want_scales)
    static = torch.full((H, D), 0.05)
    sbuf, _ = buffers()
    assert kv_ref.store_static(sbuf, static, loc, x).nonzero().flatten().tolist() == [NAN_AT, INF_AT]
    assert not bool(sbuf[loc[[NAN_AT, INF_AT]]].any()) and int(sbuf[loc[HUGE_AT]].abs().max()) == 127


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_store_refuses_the_same_tokens_as_the_reference(dtype, build, monkeypatch):
    use_build(build, monkeypatch)
    x, loc = tokens(dtype)
    buf, scales = buffers()
    with took("native"):
        bad = kv_cpu.store_per_token(buf, scales, loc, x)
    assert torch.equal(bad, kv_ref.unstorable_rows(x, True))
    want_buf, want_scales = expected_per_token(x, loc)
    assert torch.equal(buf, want_buf) and torch.equal(scales, want_scales)
    sbuf, rbuf = buffers()[0], buffers()[0]
    static = torch.full((H, D), 0.05)
    with took("native"):
        bad = kv_cpu.store_static(sbuf, static, loc, x)
    assert torch.equal(bad, kv_ref.store_static(rbuf, static, loc, x)) and torch.equal(sbuf, rbuf)
    finite = x.clone()
    finite[[NAN_AT, INF_AT]] = 1.0  # a scale overflow alone: the kernel stops at it (no pre-pass catches it)
    buf, scales = buffers()
    with took("native"):
        bad = kv_cpu.store_per_token(buf, scales, loc, finite)
    assert bad.nonzero().flatten().tolist() == [HUGE_AT] and bool(torch.isfinite(scales).all())
    clean, _ = buffers()
    with took("native"):
        assert kv_cpu.store_per_token(clean, torch.zeros(SIZE, H, dtype=torch.float16), loc[:2], x[:2]) is None


@contextmanager
def no_host_sync():
    """Every tensor-to-host read raises in the block (each would be a sync on an NPU)."""

    def sync(*_args, **_kwargs):
        raise AssertionError("a device-to-host sync in the NPU store")

    with pytest.MonkeyPatch.context() as patch:
        for name in ("__bool__", "item", "tolist", "nonzero", "__int__", "__float__"):
            patch.setattr(torch.Tensor, name, sync)
        yield


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_npu_store_refuses_without_a_host_sync(dtype, monkeypatch):
    monkeypatch.setattr(kv_npu, "_npu", lambda: npu_emulation)
    x, loc = tokens(dtype)
    buf, scales = buffers()
    poison = PoisonedRows(SIZE, "cpu")
    poison.host_known = False  # as on an NPU: marks are scattered on the device
    with no_host_sync():
        poison.mark(loc, kv_npu.store_per_token(buf, scales, loc, x))
        poison.mark(loc, kv_npu.store_static(buffers()[0], torch.full((H, D), 0.05), loc, x))
    assert torch.isfinite(scales).all() and not buf[loc[[NAN_AT, INF_AT, HUGE_AT]]].any()
    assert poison.flags.nonzero().flatten().tolist() == sorted(loc[[NAN_AT, INF_AT, HUGE_AT]].tolist())
    assert poison.maybe_marked()


def test_poisoned_rows_are_found_by_their_owner_and_cleared_when_freed():
    poison = PoisonedRows(SIZE, "cpu")
    poison.mark(torch.tensor([4, 5, 6]), None)
    assert not poison.maybe_marked()
    poison.mark(torch.tensor([4, 5, 6]), torch.tensor([False, True, False]))
    poison.mark(torch.tensor([4, 5, 6]), torch.tensor([False, False, False]))  # a later layer keeps the mark
    assert poison.maybe_marked() and poison.tokens_refused == 1
    req_to_token = torch.arange(SIZE).reshape(4, 16)

    class Kv:
        def __init__(self, row, length):
            self.req_pool_idx, self.kv_allocated_len = row, length

    class Req:
        def __init__(self, row, length):
            self.kv = Kv(row, length)

    assert poison.owned_by(req_to_token, Req(0, 6)) and not poison.owned_by(req_to_token, Req(0, 5))
    assert not poison.owned_by(req_to_token, Req(1, 16)) and not poison.owned_by(req_to_token, Req(None, 0))
    poison.clear(torch.tensor([5]))
    assert not poison.maybe_marked() and not poison.owned_by(req_to_token, Req(0, 6))

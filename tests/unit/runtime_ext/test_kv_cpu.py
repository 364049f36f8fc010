"""The compiled C8 KV read (``runtime_ext/ops/kv_cpu``) returns exactly what the torch reference
(``kv_ref``) returns: equal tensors, not close ones, for bfloat16 and float32 outputs, repeated and
unordered locations, zero and subnormal float16 scales, residual keys on locations the batch does
not read, and head dims with and without a vector tail (80 = 64 + 16). Each comparison checks that
the compiled path ran (``took``): without a library it would compare the reference with itself."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from runtime_ext.ops import get_op, kv_cpu, kv_ref
from tests.unit.runtime_ext.kv_cpu_builds import BUILDS, took, use_build

SIZE, H, D = 300, 3, 64
DIMS = [64, 80, 96, 128]


@pytest.fixture(params=BUILDS)
def build(request, monkeypatch):
    """An equality test on both builds: this CPU's (``-march=native``: AVX-512 BF16 conversions here) and
    the portable one (plain C loops, what a CPU without those instructions runs)."""
    use_build(request.param, monkeypatch)
    return request.param


def _pool(seed: int = 0, dim: int = D):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (SIZE, H, dim), dtype=torch.int8, generator=gen)
    q[7] = 127  # the extremes
    q[8] = -127
    scales = (torch.rand(SIZE, H, generator=gen) * 0.1).to(torch.float16)
    scales[5] = 0  # a zero vector's scale
    scales[6] = 3e-6  # float16 subnormals
    static = torch.rand(H, dim, generator=gen) * 0.05 + 1e-4
    locs = torch.cat((torch.tensor([5, 6, 7, 8, 5, 5]), torch.randint(1, SIZE, (200,), generator=gen)))
    return q, scales, static, locs.reshape(2, -1)


def test_the_native_library_is_built_where_a_compiler_is():
    """A C compiler is part of this machine's and CI's setup: without one this fails, not skips."""
    assert shutil.which(os.environ.get("CC", "cc")), "no C compiler: every C8 KV call would be the reference"
    assert kv_cpu.status() == "native", kv_cpu.reason()
    assert get_op("kv_gather_dequantize_per_token") is kv_cpu.gather_dequantize_per_token


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_per_token_rows_equal_the_reference(dtype, dim, build):
    q, scales, _, locs = _pool(0, dim)
    with took("reference" if dtype == torch.float16 else "native"):  # no float16 kernel
        got = kv_cpu.gather_dequantize_per_token(q, scales, locs, dtype)
    want = kv_ref.gather_dequantize_per_token(q, scales, locs, dtype)
    assert got.shape == want.shape == (*locs.shape, H, dim) and got.dtype == dtype
    assert torch.equal(got, want)
    assert bool((got[0, 1] != 0).any())  # the subnormal scale was not flushed to zero


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("subnormal", [False, True])
def test_static_rows_equal_the_reference(dtype, subnormal, dim, build):
    q, _, static, locs = _pool(1, dim)
    if subnormal:
        static[2, 5] = 1e-41  # a float32 subnormal scale: its products are subnormal too
    with took("native"):
        got = kv_cpu.gather_dequantize_static(q, static, locs, dtype)
    assert torch.equal(got, kv_ref.gather_dequantize_static(q, static, locs, dtype))


def _residuals(seed: int, dim: int = D):
    """Sorted keys for about a tenth of the vectors (some on locations no batch reads), their slots."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randperm(SIZE * H, generator=gen)[: SIZE * H // 10].sort().values.to(torch.int32)
    slots = torch.randperm(len(keys), generator=gen).to(torch.int32)
    packed = torch.randint(0, 256, (len(keys), dim // 2), dtype=torch.uint8, generator=gen)
    scale16 = (torch.rand(len(keys), generator=gen) * 0.01).to(torch.float16)
    return keys, slots, packed, scale16


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_residuals_are_added_as_the_reference_adds_them(dtype, dim, build):
    q, scales, _, locs = _pool(2, dim)
    keys, slots, packed, scale16 = _residuals(3, dim)
    base = kv_ref.gather_dequantize_per_token(q, scales, locs, dtype)
    want = kv_ref.residual_add(base.clone(), locs, keys, slots, packed, scale16)
    with took("native"):
        got = kv_cpu.residual_add(base.clone(), locs, keys, slots, packed, scale16)
    assert not torch.equal(want, base)  # residuals were added
    assert torch.equal(got, want)


def test_no_residual_key_leaves_the_values(build):
    q, scales, _, locs = _pool(4)
    base = kv_ref.gather_dequantize_per_token(q, scales, locs, torch.bfloat16)
    keys, slots, packed, scale16 = _residuals(5)
    far = torch.tensor([SIZE * H + 10], dtype=torch.int32)  # a key on a location past every read one
    with took("native"):
        got = kv_cpu.residual_add(base.clone(), locs, far, slots[:1], packed, scale16)
    assert torch.equal(got, base)


def test_the_reference_setting_turns_the_library_off(monkeypatch):
    from runtime_ext.ops.cpu_build import library

    monkeypatch.setenv("STRUCTSERVE_KV_KERNELS", "reference")
    library.cache_clear()
    try:
        assert kv_cpu.status() == "reference" and kv_cpu.reason() == "configured: kv_kernels is reference"
        q, scales, _, locs = _pool()
        want = kv_ref.gather_dequantize_per_token(q, scales, locs, torch.bfloat16)
        with took("reference"):
            assert torch.equal(kv_cpu.gather_dequantize_per_token(q, scales, locs, torch.bfloat16), want)
    finally:
        library.cache_clear()


def _new_tokens(dtype, seed: int = 6, dim: int = D):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(40, H, dim, generator=gen) * 3
    x[0] = 0  # a zero vector: scale 0
    x[1] *= 3e-4  # a scale that is subnormal in float16 (about 2e-5)
    x[2, :, :4] = 1e3  # outlier channels
    x[3] = torch.round(x[3] * 2) / 2  # ties for the rounding to even
    loc = torch.randperm(SIZE - 1, generator=gen)[:40] + 1
    return x.to(dtype), loc


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_per_token_store_equals_the_reference(dtype, dim, build):
    x, loc = _new_tokens(dtype, 6, dim)
    bufs = [(torch.zeros(SIZE, H, dim, dtype=torch.int8), torch.zeros(SIZE, H, dtype=torch.float16)) for _ in range(2)]
    kv_ref.store_per_token(*bufs[0], loc, x)
    with took("native"):
        kv_cpu.store_per_token(*bufs[1], loc, x)
    assert torch.equal(bufs[0][0], bufs[1][0]) and torch.equal(bufs[0][1], bufs[1][1])
    assert bool((bufs[1][1][loc[1]] > 0).all())  # the subnormal scale was kept


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_static_store_equals_the_reference(dtype, dim, build):
    x, loc = _new_tokens(dtype, 7, dim)
    _, _, static, _ = _pool(8, dim)
    static[0] = 2**-5  # x / scale exactly half-way between integers: ties go to even, as torch.round
    x[3, 0] = (torch.arange(dim) - dim // 2 + 0.5) * 2**-5
    bufs = [torch.zeros(SIZE, H, dim, dtype=torch.int8) for _ in range(2)]
    kv_ref.store_static(bufs[0], static, loc, x)
    with took("native"):
        kv_cpu.store_static(bufs[1], static, loc, x)
    assert torch.equal(bufs[0], bufs[1]) and int(bufs[1].abs().max()) == 127  # clamped like the reference


@pytest.mark.parametrize("rotation", ["none", "kv"])
def test_the_methods_store_and_read_through_the_compiled_calls(rotation, monkeypatch):
    """SGLang hands the store K and V as views of the qkv output (not contiguous): they still take
    the compiled path, not the reference."""
    from runtime_ext.kv_cache.methods import C8DynamicKVCacheMethod

    use_build("native", monkeypatch)

    for name in ("store_per_token", "gather_dequantize_per_token"):
        monkeypatch.setattr(kv_ref, name, lambda *a, **k: pytest.fail("the reference ran"))
    method = C8DynamicKVCacheMethod(torch.bfloat16, rotation=rotation)
    bufs = method.create_buffers(SIZE, H, D, 1, "cpu")
    qkv = torch.randn(4, 3 * H * D, dtype=torch.bfloat16)
    k, v = qkv[:, H * D : 2 * H * D], qkv[:, 2 * H * D :]
    assert not k.is_contiguous()
    loc = torch.tensor([3, 9, 4, 200])
    with took("native"):
        method.quantize_and_store(bufs["k_buffer"][0], bufs["v_buffer"][0], bufs["k_scale_buffer"][0],
                                  bufs["v_scale_buffer"][0], loc, k, v)  # fmt: skip
        rows = method.gather(bufs["v_buffer"][0], bufs["v_scale_buffer"][0], loc)
    assert rows.shape == (4, H, D) and bool(rows.any())


def _side(capacity: int, dim: int = D):
    from runtime_ext.kv_cache.residual import ResidualSlots

    return ResidualSlots(capacity, H, dim, tau=0.02, device="cpu")


def _state(side) -> list:
    used = side.slots.long()
    return [side.keys, side.slots, side.free, side.counts, side.packed[used], side.scale[used]]


def _replay(impl, side, steps) -> None:
    for i, (locs, x, deq8) in enumerate(steps):
        impl.residual_store(*side._state(), H, side.tau, locs, x, deq8)
        if i == 4:
            impl.residual_release(*side._state()[:4], H, torch.cat((steps[1][0], torch.tensor([SIZE + 5]))))


@pytest.mark.parametrize("dim", [64, 80])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_residual_store_and_release_leave_the_state_the_reference_leaves(dtype, dim, build):
    """The same stores and releases through the compiled calls and through the reference: equal keys,
    slots, free stack, counts and residuals (no error lies within 1e-4 of tau: the compiled call sums
    in double, so a near tie may go either way)."""
    gen = torch.Generator().manual_seed(11)
    scale = torch.full((H, dim), 4.0 / 127)
    sides = {name: _side(40, dim) for name in ("ref", "cpu")}
    steps = []
    for step in range(6):
        x = torch.randn(30, H, dim, generator=gen)
        x[torch.rand(30, H, generator=gen) < 0.3] *= 4  # clamped: well above tau
        x = x.to(dtype)
        deq8 = kv_ref.dequantize_static(kv_ref.quantize_static(x, scale), scale, dtype)
        eps = kv_ref.relative_error(x, deq8)
        assert float(((eps - 0.02).abs() / 0.02).min()) > 1e-4
        locs = torch.randperm(SIZE, generator=gen)[:30] if step != 3 else steps[0][0]  # step 3 rewrites step 0's
        steps.append((locs, x, deq8))
    _replay(kv_ref, sides["ref"], steps)
    with took("native"):
        _replay(kv_cpu, sides["cpu"], steps)
    ref, cpu = _state(sides["ref"]), _state(sides["cpu"])
    assert int(sides["ref"].counts[3]) > 0 and 0 < sides["ref"].used  # it filled up and dropped some
    for want, got in zip(ref, cpu):
        assert torch.equal(want, got)

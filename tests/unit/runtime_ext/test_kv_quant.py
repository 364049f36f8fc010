"""C8 KV math: round-trip bounds (exact math), shapes/dtypes, zeros, non-finite input, INT4
packing, and the NPU path against the emulation of the torch_npu ops it calls."""

from __future__ import annotations

import pytest
import torch

from runtime_ext.ops import OPS, get_op, kv_npu
from runtime_ext.ops import kv_ref as ref
from tests.unit.runtime_ext import npu_emulation


def kv(t=64, h=4, d=64, seed=0, outliers=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, d, generator=g)
    if outliers:  # a few channels 30x larger, as real K caches have
        x[:, :, :3] *= 30
        x[::7] *= 8
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("outliers", [False, True])
def test_c8_dynamic_round_trip_is_within_half_a_step(outliers):
    x = kv(outliers=outliers).float()
    q, scale = ref.quantize_per_token(x)
    assert q.dtype == torch.int8 and q.shape == x.shape and scale.shape == x.shape[:2]
    assert scale.dtype == torch.float32 and int(q.abs().max()) == 127
    err = (ref.dequantize_per_token(q, scale, torch.float32) - x).abs()
    assert bool((err <= scale.unsqueeze(-1) / 2 + 1e-6).all())
    assert ref.dequantize_per_token(q, scale, torch.bfloat16).dtype == torch.bfloat16


def test_c8_static_clamps_and_bounds_in_range_values():
    x = kv().float()
    scale = x.abs().amax(dim=0) / 127  # per head and channel, as calibration computes it
    q = ref.quantize_static(x, scale)
    err = (ref.dequantize_static(q, scale, torch.float32) - x).abs()
    assert bool((err <= scale / 2 + 1e-6).all())
    clamped = ref.quantize_static(x * 10, scale)  # values beyond calibration saturate
    assert int(clamped.max()) == 127 and int(clamped.min()) == -127


def test_zero_vectors_and_non_finite_input():
    x = torch.zeros(3, 2, 8)
    q, scale = ref.quantize_per_token(x)
    assert bool((q == 0).all()) and bool((scale == 0).all())
    assert bool((ref.dequantize_per_token(q, scale, torch.float32) == 0).all())
    assert bool((ref.relative_error(x, x) == 0).all())
    for bad in (float("nan"), float("inf")):
        y = torch.ones(2, 2, 8)
        y[1, 1, 3] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            ref.quantize_per_token(y)
        with pytest.raises(ValueError, match="NaN or inf"):
            ref.quantize_static(y, torch.ones(2, 8))


def test_int4_packing_is_exact_and_the_residual_shrinks_the_error():
    values = torch.arange(-8, 8).repeat(3, 2)
    packed = ref.pack_int4(values)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 16)
    assert torch.equal(ref.unpack_int4(packed), values.to(torch.int8))
    with pytest.raises(ValueError, match="even"):
        ref.pack_int4(torch.zeros(2, 3))
    x = kv(outliers=True).float()
    scale = x.abs().mean(dim=0) * 3 / 127  # a static scale that clips the outliers
    deq8 = ref.dequantize_static(ref.quantize_static(x, scale), scale, torch.float32)
    packed, rscale = ref.quantize_residual(x - deq8)
    assert packed.shape == (*x.shape[:2], x.shape[2] // 2)  # 32 B per 64-dim vector + a scale
    fixed = deq8 + ref.dequantize_residual(packed, rscale)
    assert bool((ref.relative_error(x, fixed) <= ref.relative_error(x, deq8) + 1e-6).all())
    assert float(ref.relative_error(x, fixed).mean()) < 0.5 * float(ref.relative_error(x, deq8).mean())


@pytest.fixture
def emulated_npu(monkeypatch):
    monkeypatch.setattr(kv_npu, "_npu", lambda: npu_emulation)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_npu_path_matches_the_reference_under_the_emulated_ops(emulated_npu, dtype):
    """As the C8 methods call them: C8-D stores float16 scales (the op's float32 scale rounded to
    nearest: at most 0.5 + 127 * 2**-11 steps of error), reads come back in the model dtype (a float32
    model computes the fp16/bf16-only ops in bfloat16)."""
    x = kv(outliers=True).to(dtype)
    q_npu, s_npu = get_op("kv_quantize_per_token", "npu")(x, torch.float16)
    assert q_npu.dtype == torch.int8 and s_npu.dtype == torch.float16
    exact = x.to(torch.bfloat16 if dtype == torch.float32 else dtype).float().abs().amax(dim=-1) / 127
    err = (ref.dequantize_per_token(q_npu, s_npu, torch.float32) - x.float()).abs()
    assert bool((err <= exact.unsqueeze(-1) * (0.5 + 127 * 2**-11) + 1e-6).all())
    q_ref, _ = get_op("kv_quantize_per_token", "cpu")(x, torch.float16)
    assert (q_npu.int() - q_ref.int()).abs().max() <= 1  # the reference rounds its fp16 scale up
    scale = x.float().abs().amax(dim=0) / 127
    q_static = get_op("kv_quantize_static", "npu")(x, scale)
    assert torch.equal(q_static, ref.quantize_static(x, scale))
    deq = get_op("kv_dequantize_static", "npu")(q_static, scale, dtype)
    assert deq.dtype == dtype
    expect = ref.dequantize_static(q_static, scale, torch.bfloat16 if dtype == torch.float32 else dtype)
    assert torch.equal(deq.to(expect.dtype), expect)
    with pytest.raises(ValueError):
        get_op("kv_quantize_per_token", "npu")(torch.full((2, 2, 4), float("nan"), dtype=torch.bfloat16))


def test_dispatch_table():
    assert get_op("kv_quantize_per_token", "cuda") is ref.quantize_per_token  # no entry: reference
    assert all("cpu" in table for table in OPS.values())
    with pytest.raises(KeyError, match="known"):
        get_op("nope")


def test_float16_scales_never_clip_and_keep_the_half_step_bound():
    x = kv(outliers=True).float()
    q, scale = ref.quantize_per_token(x, torch.float16)
    assert scale.dtype == torch.float16
    err = (ref.dequantize_per_token(q, scale, torch.float32) - x).abs()
    assert bool((err <= scale.float().unsqueeze(-1) / 2 + 1e-6).all())


@pytest.mark.parametrize("head_dim, ratio", [(64, 0.516), (128, 0.508)])
def test_c8_bytes_per_token_against_bf16(head_dim, ratio):
    from runtime_ext.kv_cache.sizing import cell_bytes

    bf16 = 8 * head_dim * 30 * 2 * 2  # heads * dim * layers * (K, V) * 2 bytes
    c8 = cell_bytes("c8_dynamic", 30, 8, head_dim)
    assert c8 / bf16 == pytest.approx(ratio, abs=1e-3) and bf16 / c8 >= 1.9


@pytest.mark.parametrize("d", [16, 64, 128])
def test_hadamard_is_orthogonal_symmetric_and_keeps_qk(d):
    h = ref.hadamard(d)
    assert torch.allclose(h @ h.T, torch.eye(d), atol=1e-6) and torch.equal(h, h.T)
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(9, 5, d, generator=g), kv(t=40, h=1, d=d, outliers=True).float()
    scores = torch.einsum("qhd,khd->hqk", q, k.expand(-1, 5, -1))
    rotated = torch.einsum("qhd,khd->hqk", ref.rotate(q, h), ref.rotate(k, h).expand(-1, 5, -1))
    assert (rotated - scores).abs().max() <= 1e-5 * scores.abs().max()
    assert torch.allclose(ref.rotate(ref.rotate(k, h), h), k, rtol=1e-5, atol=1e-4)  # its own inverse
    with pytest.raises(ValueError, match="power-of-two"):
        ref.hadamard(48)


def test_rotation_cuts_the_per_token_error_on_outlier_keys():
    """Per-token INT8 of keys with a few large channels: the rotated round trip (quantize x·H,
    dequantize, rotate back) errs strictly less on every vector, and several times less on average."""
    x = kv(outliers=True).float()
    h = ref.hadamard(x.shape[-1])

    def err(rot: bool):
        y = ref.rotate(x, h) if rot else x
        back = ref.dequantize_per_token(*ref.quantize_per_token(y), torch.float32)
        return ref.relative_error(x, ref.rotate(back, h) if rot else back)

    plain, rotated = err(False), err(True)
    assert bool((rotated < plain).all())
    assert float(rotated.mean()) < 0.5 * float(plain.mean())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_npu_rotation_matches_the_reference_under_the_emulated_ops(emulated_npu, dtype):
    """npu_linear takes float32/float16 (no bfloat16): the NPU path rotates in float32 for every model dtype."""
    x, h = kv(outliers=True).to(dtype), ref.hadamard(64)
    out = get_op("kv_rotate", "npu")(x, h)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.allclose(out.float(), ref.rotate(x, h).float(), rtol=1e-2 if dtype != torch.float32 else 1e-5)
    # the store asks for float32; the NPU's quantize ops take fp16/bf16, so a half model keeps its dtype
    assert get_op("kv_rotate", "npu")(x, h, torch.float32).dtype == dtype

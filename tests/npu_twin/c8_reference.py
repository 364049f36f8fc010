"""What the C8 twin tests compare against (plain torch; no sglang): the CPU reference read of each C8
mode built from ``runtime_ext/ops/kv_ref.py``'s primitives, causal attention in float32, the inputs
and a calibration file for the static modes."""

from __future__ import annotations

from pathlib import Path

import torch

from runtime_ext.kv_cache.calibration import Calibration
from runtime_ext.ops import kv_ref

LAYERS, KV_HEADS, HEADS, DIM = 2, 2, 4, 64  # tests/npu_twin/sglang_npu.py TINY_LLAMA
TAU = 0.004  # C8-S residual threshold: a few percent of these vectors exceed it


def kv_values(tokens: int, seed: int) -> torch.Tensor:
    """K or V ``[tokens, KV_HEADS, DIM]`` in bf16: normal, with two outlier channels per head."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, KV_HEADS, DIM, generator=g)
    x[:, :, 3] *= 6
    x[:, :, 40] *= -4
    return x.to(torch.bfloat16)


def queries(tokens: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, HEADS * DIM, generator=g).to(torch.bfloat16)


def write_calibration(path: Path, samples: list[torch.Tensor]) -> Path:
    """Per-channel static scales (absmax / 127 over ``samples``, all layers and both sides alike)."""
    absmax = torch.cat([s.float().reshape(-1, KV_HEADS, DIM) for s in samples]).abs().amax(0)
    scales = (absmax / kv_ref.INT8_MAX).tolist()
    Calibration(
        model="tiny-llama", layers=LAYERS, kv_heads=KV_HEADS, head_dim=DIM, k_scale=[scales] * LAYERS,
        v_scale=[scales] * LAYERS, tau=TAU, eps_mean=0.0, eps_p99=0.0, outlier_rate=0.5, tokens=1,
    ).save(path)  # fmt: skip
    return path


def reference_read(mode: str, x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """``x[T, H, D]`` as mode stores and reads it, from kv_ref's primitives, in float32 (model space).
    c8_dynamic rotates K and V (``kv_rotation: auto``); the static modes store unrotated.

    At the NPU path's documented precisions (``ops/kv_npu.py``), where they differ from the CPU
    path's: C8-D rotates in the model dtype (``npu_linear``'s result cast back to bf16, as the
    quantize op takes fp16/bf16), quantizes with the float32 scale of ``npu_dynamic_quant`` and
    stores it rounded to the nearest float16 (the CPU path rotates in float32 and rounds the scale
    up): up to one quantization step apart from the CPU path's read, by design."""
    if mode == "bf16":
        return x.float()
    if mode == "c8_dynamic":
        h = kv_ref.hadamard(DIM)
        q, s = kv_ref.quantize_per_token(kv_ref.rotate(x, h), torch.float32)
        rows = kv_ref.dequantize_per_token(q, s.to(torch.float16), torch.bfloat16)
        return kv_ref.rotate(rows, h).float()
    assert scale is not None
    deq = kv_ref.dequantize_static(kv_ref.quantize_static(x, scale), scale, torch.bfloat16)
    out = deq.float()
    if mode == "c8_static_residual":
        outlier = kv_ref.relative_error(x, deq) > TAU
        packed, r_scale = kv_ref.quantize_residual(x.float() - deq.float())
        residual = kv_ref.dequantize_residual(packed, r_scale.to(torch.float16).float())
        out = torch.where(outlier.unsqueeze(-1), out + residual, out)
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention of ``q[Q, HEADS*DIM]``, the last Q of ``k``/``v`` ``[S, KV_HEADS, DIM]``'s positions."""
    qh = q.float().view(-1, HEADS, DIM)
    groups = HEADS // KV_HEADS
    kk, vv = k.float().repeat_interleave(groups, 1), v.float().repeat_interleave(groups, 1)
    scores = torch.einsum("qhd,khd->hqk", qh, kk) * scale
    pos = torch.arange(k.shape[0] - q.shape[0], k.shape[0]).unsqueeze(1)
    scores = scores.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv).reshape(q.shape[0], -1)

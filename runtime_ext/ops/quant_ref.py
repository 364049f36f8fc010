"""Linear-layer quantization math: the torch reference path (runs on any device).

Weights ``w[N, K]`` (out, in); activations ``x[M, K]``. Quantized here: symmetric, zero-point 0.
Weight-only layers calibrated elsewhere (asymmetric GPTQ, ``tools/quant/gptq.py``) may carry an
``offset[N, ceil(K/group)]`` per group: the weight is ``(q + offset) · scale``, the form of
torch_npu's ``antiquant_offset``.

- **Per-channel INT8 weights** (W8A8): ``scale[N] = absmax(w[n, :]) / 127``.
- **Group-wise weights** (W8A16 / W4A16): groups of ``group`` input channels,
  ``scale[N, ceil(K/group)] = absmax / qmax`` with qmax 127 (8 bit) or 7 (4 bit); when K is
  not a multiple of the group the last group is shorter (SmolLM2: K = 576 = 4.5 × 128).
  INT4 values are packed two per byte along K (low nibble first): ``[N, K/2]`` uint8.
- **Per-token dynamic INT8 activations**: ``scale[M] = absmax(x[m, :]) / 127``.
- **INT8 matmul**: ``torch._int_mm(xq, wq.T)`` (int32 accumulate), rescaled by
  ``x_scale[m] * w_scale[n]``.

Non-finite weights are rejected (``ValueError``) at quantization time.
"""

from __future__ import annotations

import torch

from runtime_ext.ops.kv_ref import INT4_MAX, INT8_MAX, pack_int4, unpack_int4

QMAX = {8: INT8_MAX, 4: INT4_MAX}


def _safe(scale: torch.Tensor) -> torch.Tensor:
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def quantize_weight_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w[N, K]`` -> (int8 ``[N, K]``, float32 ``scale[N]``)."""
    if not bool(torch.isfinite(w).all()):
        raise ValueError("the weight holds NaN or inf; refusing to quantize it")
    wf = w.float()
    scale = wf.abs().amax(dim=1) / INT8_MAX
    q = torch.round(wf / _safe(scale).unsqueeze(1)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def quantize_weight_groupwise(w: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``w[N, K]`` -> (int8 ``[N, K]`` or packed uint8 ``[N, K/2]`` for 4 bit, float32 ``scale[N, ceil(K/group)]``)."""
    n, k = w.shape
    if bits == 4 and k % 2:
        raise ValueError(f"INT4 packing needs an even in_features, got {k}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("the weight holds NaN or inf; refusing to quantize it")
    groups = -(-k // group)
    grouped = torch.nn.functional.pad(w.float(), (0, groups * group - k)).reshape(n, groups, group)
    scale = grouped.abs().amax(dim=2) / QMAX[bits]
    q = torch.round(grouped / _safe(scale).unsqueeze(2)).clamp_(-QMAX[bits], QMAX[bits])
    q = q.reshape(n, groups * group)[:, :k].to(torch.int8)
    return (pack_int4(q) if bits == 4 else q), scale


def dequantize_weight_groupwise(
    q: torch.Tensor,
    scale: torch.Tensor,
    bits: int,
    group: int,
    dtype: torch.dtype,
    offset: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(q + offset) · scale`` per group (offset ``None``: 0)."""
    values = (unpack_int4(q) if bits == 4 else q).float()
    k = values.shape[1]
    if offset is not None:
        values += offset.float().repeat_interleave(group, dim=1)[:, :k]
    return (values * scale.float().repeat_interleave(group, dim=1)[:, :k]).to(dtype)


def dequantize_weight_per_channel(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (q.float() * scale.float().unsqueeze(1)).to(dtype)


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x[M, K]`` -> (int8 ``[M, K]``, float32 ``scale[M]``)."""
    xf = x.float()
    scale = xf.abs().amax(dim=1) / INT8_MAX
    return torch.round(xf / _safe(scale).unsqueeze(1)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8), scale


def prepare_w8a8(wq: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """At load: int8 ``[N, K]`` -> the ``[K, N]`` operand ``_int_mm`` takes, and the scales."""
    return wq.t().contiguous(), w_scale.float()


def w8a8_matmul(
    x: torch.Tensor, wq_t: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Dynamic W8A8: ``x[M, K]`` (float) with ``wq_t[K, N]`` int8 and ``w_scale[N]`` -> ``[M, N]`` in x's dtype."""
    xq, x_scale = quantize_per_token(x)
    acc = torch._int_mm(xq, wq_t).float()
    y = acc * x_scale.unsqueeze(1) * w_scale.unsqueeze(0)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def prepare_weight_only(
    q: torch.Tensor, scale: torch.Tensor, bits: int, group: int, offset: torch.Tensor | None = None
) -> dict:
    """At load: what ``weight_only_matmul`` reads (here: the stored tensors as they are; an
    all-zero offset is dropped, an integral one kept as int8: 1 byte per group)."""
    return {"q": q, "scale": scale, "bits": bits, "group": group, "offset": compact_offset(offset)}


def compact_offset(offset: torch.Tensor | None) -> torch.Tensor | None:
    """``None`` for no or an all-zero offset; int8 when every value is an integer in int8's
    range (the zero points of a calibration), float32 otherwise."""
    if offset is None or not bool(offset.any()):
        return None
    if not bool(torch.isfinite(offset).all()):
        raise ValueError("the weight offset holds NaN or inf")
    integral = bool((offset == offset.round()).all()) and bool((offset.abs() <= 127).all())
    return offset.to(torch.int8) if integral else offset.float()


def weight_only_matmul(x: torch.Tensor, prepared: dict, bias: torch.Tensor | None = None) -> torch.Tensor:
    """W8A16 / W4A16: dequantize the weight to x's dtype, then a float matmul."""
    p = prepared
    w = dequantize_weight_groupwise(p["q"], p["scale"], p["bits"], p["group"], x.dtype, p.get("offset"))
    return torch.nn.functional.linear(x, w, bias)

"""NPU implementations of the C8 KV ops on ``torch_npu`` (Ascend).

Verification level: contract-tested against documented op semantics, unverified on hardware.
No NPU exists where this was written. Each function is tested against a strict emulation of the
torch_npu ops it calls (``tests/unit/runtime_ext/npu_emulation.py``), which enforces each op's
documented contract (``npu_contracts.py``, rules cite the hiascend.com torch_npu API pages; table in
``docs/npu-contracts.md``); the real engine's calls are recorded and replayed through it
(``tests/engine/test_npu_recorded_calls.py``).

- C8-D store: ``torch_npu.npu_dynamic_quant(x)`` (x float16/bfloat16, ≥ 2-D): int8 y and a float32
  scale = rowMax(|x|)/127 per token and head. The pool stores float16 scales, so the float32 scale
  is rounded to nearest float16: a read ``q * s16`` then errs by at most ``(0.5 + 127 * 2**-11) * s``
  ≈ 0.56 steps (the fp16 rounding moves ``127 * s`` by up to 127·2⁻¹¹·s) instead of 0.5; the
  reference path rounds its float16 scale up and keeps the 0.5-step bound.
- C8-S store: ``npu_quantize(x, s, None, torch.qint8, axis=-1, div_mode=True)`` on ``[T, H*D]``
  float32 with the float32 per-channel scales ``[H*D]``; the op saturates to [-128, 127], we clamp
  to ±127 as the reference does.
- C8-S read: ``npu_anti_quant(q, s, dst_dtype=...)`` with int8 ``[T, H*D]`` and float32 ``s[H*D]``.
  ``dst_dtype`` may only be float16/bfloat16: a float32 request is served in bfloat16 and upcast.
- C8-D read: no op fits (``npu_anti_quant``'s scale is 1-D along the last axis, not per row): the
  dispatch table uses the reference broadcast multiply on every device, output in the model dtype.

- Rotation (``kv_rotation``): ``npu_linear(x2d, h)`` = ``x @ hᵀ`` (h is symmetric) on ``[N, D]``
  float32 input and a float32 ``[D, D]`` weight; the page lists float32/float16/int32/int8 only (no
  bfloat16), so the rotation runs in float32 and its result is cast to the caller's dtype (a float32
  result for a half-precision input comes back in the input's dtype: the quantize ops take fp16/bf16).

Float32 models: the ops take float16/bfloat16 only, so activations are cast to bfloat16 at the op
boundary (range of float32, 8-bit mantissa) and results cast back: a float32 model on the NPU path
has bfloat16 precision in these ops.

The op module is looked up at call time (``_npu()``), so tests can substitute the emulation and the
reference path never imports ``torch_npu``.
"""

from __future__ import annotations

from typing import Any

import torch

from runtime_ext.ops import kv_ref
from runtime_ext.ops.kv_ref import INT8_MAX, _check_finite, take_rows

HALF = (torch.float16, torch.bfloat16)


def _npu() -> Any:
    import torch_npu  # noqa: F401  (Ascend only)

    return torch_npu


def op_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype an fp16/bf16-only op computes in for a model of ``dtype`` (float32 -> bfloat16)."""
    return dtype if dtype in HALF else torch.bfloat16


def quantize_per_token(
    x: torch.Tensor, scale_dtype: torch.dtype = torch.float32, check_finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``npu_dynamic_quant`` per token; ``check_finite=False`` for the store, which zeroed the
    unstorable tokens already (and must not sync)."""
    if check_finite:
        _check_finite(x, "the KV tensor")
    q, scale = _npu().npu_dynamic_quant(x.to(op_dtype(x.dtype)))
    return q, scale.to(scale_dtype)


def quantize_static(x: torch.Tensor, scale: torch.Tensor, check_finite: bool = True) -> torch.Tensor:
    if check_finite:
        _check_finite(x, "the KV tensor")
    flat = x.reshape(x.shape[0], -1)
    q = _npu().npu_quantize(flat.float(), scale.reshape(-1).float(), None, torch.qint8, flat.dim() - 1, True)
    return q.reshape(x.shape).clamp_(-INT8_MAX, INT8_MAX)


def dequantize_static(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    flat = q.reshape(q.shape[0], -1)
    out = _npu().npu_anti_quant(flat, scale.reshape(-1).float(), offset=None, dst_dtype=op_dtype(dtype))
    return out.reshape(q.shape).to(dtype)


def store_per_token(buf: torch.Tensor, scale_buf: torch.Tensor, loc, x: torch.Tensor) -> torch.Tensor:
    """Quantize ``x[T, H, D]`` into rows ``loc``; tokens ``kv_ref.unstorable_rows`` names are stored as
    zeros. Returns that mask as a device tensor: no host sync."""
    bad = kv_ref.unstorable_rows(x, scale_buf.dtype == torch.float16)
    q, s = quantize_per_token(kv_ref.zero_rows(x, bad), scale_buf.dtype, check_finite=False)
    buf[loc], scale_buf[loc] = q, s
    return bad


def store_static(buf: torch.Tensor, scale: torch.Tensor, loc, x: torch.Tensor) -> torch.Tensor:
    """``store_per_token`` with the per-channel ``scale[H, D]`` (only NaN/inf are unstorable)."""
    bad = kv_ref.unstorable_rows(x, False)
    buf[loc] = quantize_static(kv_ref.zero_rows(x, bad), scale, check_finite=False)
    return bad


def gather_dequantize_static(buffer: torch.Tensor, scale: torch.Tensor, locs: torch.Tensor, dtype: torch.dtype):
    """Rows ``locs`` (gathered with ``index_select``), then ``dequantize_static``."""
    return dequantize_static(take_rows(buffer, locs), scale, dtype)


def rotate(x: torch.Tensor, h: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """As the reference, except that a float32 result asked for a float16/bfloat16 ``x`` comes back in
    ``x``'s dtype: on this path it only feeds the KV quantize ops, which take float16/bfloat16 and
    would otherwise cast it to bfloat16 (losing an fp16 model's precision)."""
    flat = x.reshape(-1, x.shape[-1]).float()
    out = dtype or x.dtype
    if out == torch.float32 and x.dtype in HALF:
        out = x.dtype
    return _npu().npu_linear(flat, h.float()).reshape(x.shape).to(out)

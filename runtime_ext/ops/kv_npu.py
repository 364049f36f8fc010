"""NPU implementations of the C8 KV ops on ``torch_npu`` (Ascend).

UNVERIFIED ON HARDWARE: no NPU exists where this was written. Each function is tested
against an emulation of the documented semantics of the ``torch_npu`` ops it calls
(``tests/unit/runtime_ext/npu_emulation.py``):

- ``torch_npu.npu_dynamic_quant(x)``: per-token symmetric INT8 over the last dim;
  returns (int8 y, float32 scale = rowMax(|x|) / 127 with the last dim removed).
- ``torch_npu.npu_quantize(x, scales, zero_points, dtype, axis)``: per-channel static
  quantization ``round(x / scales)`` (documented as ``x * scales`` when ``div_mode`` is
  False; we pass ``div_mode=True``), saturated to the INT8 range.
- ``torch_npu.npu_anti_quant(x, scale, offset=None, dst_dtype=...)``: ``(x + offset) * scale``
  with ``scale`` broadcast along the last dim.

Per-token dequantization needs no NPU op (a broadcast multiply): the dispatch table uses the
reference for it on every device.

The op module is looked up at call time (``_npu()``), so tests can substitute the
emulation and the reference path never imports ``torch_npu``.
"""

from __future__ import annotations

from typing import Any

import torch

from runtime_ext.ops.kv_ref import INT8_MAX, _check_finite


def _npu() -> Any:
    import torch_npu  # noqa: F401  (Ascend only)

    return torch_npu


def quantize_per_token(x: torch.Tensor, scale_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    _check_finite(x, "the KV tensor")
    if scale_dtype != torch.float32:  # a narrower stored scale: quantize against it (reference math)
        from runtime_ext.ops.kv_ref import quantize_per_token as reference

        return reference(x, scale_dtype)
    q, scale = _npu().npu_dynamic_quant(x.to(torch.bfloat16) if x.dtype == torch.float32 else x)
    return q, scale.float()


def quantize_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    _check_finite(x, "the KV tensor")
    flat = x.reshape(x.shape[0], -1)
    q = _npu().npu_quantize(flat.float(), scale.reshape(-1).float(), None, torch.qint8, -1, True)
    return q.reshape(x.shape).clamp_(-INT8_MAX, INT8_MAX)


def dequantize_static(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    flat = q.reshape(q.shape[0], -1)
    out = _npu().npu_anti_quant(flat, scale.reshape(-1).float(), offset=None, dst_dtype=dtype)
    return out.reshape(q.shape)

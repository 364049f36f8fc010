"""Reference emulation of the documented semantics of the torch_npu ops our NPU kernels
call (hiascend.com torch_npu API reference). The NPU cannot exist here; this stands in
for it, written from the documentation, not from our reference kernels.

- npu_dynamic_quant(x, *, smooth_scales=None): per-token symmetric INT8 over the last
  dim: scale = rowMax(|x|) / 127 (float32, last dim removed), y = round(x / scale) as int8.
- npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True):
  result = input / scales + zero_points (div_mode True) or input * scales + zero_points,
  scales broadcast along ``axis`` (only the last axis is supported), saturated to dtype.
- npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
  y = (x + offset) * scale, scale broadcast along the last dim; dst_dtype default float16.
"""

from __future__ import annotations

import torch


def npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None):
    assert x.dim() > 1 and x.dtype in (torch.float16, torch.bfloat16), "documented input constraints"
    xf = x.float() if smooth_scales is None else x.float() * smooth_scales.float()
    scale = xf.abs().amax(dim=-1) / 127.0
    y = torch.round(xf / torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1))
    return y.clamp(-128, 127).to(torch.int8), scale


def npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True):
    assert axis in (-1, input.dim() - 1), "only the last axis is supported"
    y = input.float() / scales.float() if div_mode else input.float() * scales.float()
    if zero_points is not None:
        y = y + zero_points.float()
    assert dtype == torch.qint8
    return torch.round(y).clamp(-128, 127).to(torch.int8)


def npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
    y = x.float() if offset is None else x.float() + offset.float()
    return (y * scale.float()).to(dst_dtype or torch.float16)

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
- npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
  output_dtype=None): int8 x1 [M, K] @ int8 x2 [K, N] accumulated in int32, then
  * scale[N] * pertoken_scale[M]; an int32 bias is added before the rescale, a float bias after;
  result in output_dtype.
- npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, ...,
  bias=None, antiquant_group_size=0): y = x @ ((weight + antiquant_offset) * antiquant_scale)
  (+ bias). weight [K, N] int8, or int32 [K, N/8] holding 8 int4 each; antiquant_scale [N]
  per channel or [K/G, N] per group of G rows of K.
- npu_convert_weight_to_int4pack(weight): int32 [K, N] with values in [-8, 7] -> int32
  [K, N/8], 8 consecutive values of a row per element, the first in the lowest 4 bits.
- npu_format_cast(x, acl_format): the same values in another memory layout (FRACTAL_NZ = 29).
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


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
    assert x1.dtype == torch.int8 and x2.dtype == torch.int8
    acc = (x1.to(torch.int64) @ x2.to(torch.int64)).to(torch.float64)
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.to(torch.float64)
    y = acc * scale.to(torch.float64)
    if pertoken_scale is not None:
        y = y * pertoken_scale.to(torch.float64).unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        y = y + bias.to(torch.float64)
    return y.to(output_dtype or torch.int8)


def npu_convert_weight_to_int4pack(weight):
    assert weight.dtype == torch.int32 and weight.shape[-1] % 8 == 0
    nibbles = (weight & 0xF).reshape(*weight.shape[:-1], -1, 8)
    packed = torch.zeros(nibbles.shape[:-1], dtype=torch.int64)
    for i in range(8):
        packed |= nibbles[..., i].to(torch.int64) << (4 * i)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def _unpack_int4pack(packed):
    wide = packed.to(torch.int64) & 0xFFFFFFFF
    values = torch.stack([(wide >> (4 * i)) & 0xF for i in range(8)], dim=-1).flatten(-2)
    return torch.where(values > 7, values - 16, values)


def npu_weight_quant_batchmatmul(
    x,
    weight,
    antiquant_scale,
    antiquant_offset=None,
    quant_scale=None,
    quant_offset=None,
    bias=None,
    antiquant_group_size=0,
):
    w = (_unpack_int4pack(weight) if weight.dtype == torch.int32 else weight).to(torch.float64)
    if antiquant_offset is not None:
        w = w + antiquant_offset.to(torch.float64)
    scale = antiquant_scale.to(torch.float64)
    if antiquant_group_size:
        scale = scale.repeat_interleave(antiquant_group_size, dim=0)[: w.shape[0]]
    y = x.to(torch.float64) @ (w * scale)
    if bias is not None:
        y = y + bias.to(torch.float64)
    return y.to(x.dtype)


def npu_format_cast(x, acl_format):
    assert acl_format == 29, "FRACTAL_NZ"
    return x

"""A strict emulation of the torch_npu ops our NPU kernels call: each op first checks its documented
contract (``npu_contracts``: dtypes, shapes, argument ranges, each rule citing its torch_npu API page;
a broken rule raises ``ContractViolation``), then computes the documented semantics. The NPU cannot
exist here; this stands in for it, written from the documentation, not from our reference kernels.

- npu_dynamic_quant(x, *, smooth_scales=None): per-token symmetric INT8 over the last dim:
  scale = rowMax(|x|) / 127 (float32, last dim removed), y = round(x / scale) as int8.
- npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True): input / scales (+ zero_points)
  (div_mode True) or input * scales, scales broadcast along the last axis, saturated to int8.
- npu_anti_quant(x, scale, *, offset=None, dst_dtype=None): (x + offset) * scale along the last dim,
  in dst_dtype (default float16).
- npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
  int8 x1 [M, K] @ int8 x2 [K, N] accumulated in int32, * scale[N] * pertoken_scale[M]; an int32 bias
  is added before the rescale, a float bias after; result in output_dtype.
- npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, ..., bias=None,
  antiquant_group_size=0): x @ ((weight + offset) * scale) (+ bias); weight [K, N] int8 or int32
  [K, N/8] (8 int4 each); scale [N] per channel or [ceil(K/G), N] per group of G rows of K.
- npu_convert_weight_to_int4pack(weight): int32 [K, N] in [-8, 7] -> int32 [K, N/8], 8 consecutive
  values of a row per element, the first in the lowest 4 bits.
- npu_linear(input, weight, bias=None): input [M, K] @ weight [N, K]ᵀ (+ bias), in input's dtype.
- npu_format_cast(x, acl_format): the same values in another memory layout (ND = 2, FRACTAL_NZ = 29).

Documented variants we never call (int4 activations, quant_scale outputs, int64 scales) are not
emulated: they raise ``NotImplementedError`` (a limit of the double, not a contract rule).
"""

from __future__ import annotations

import torch

from tests.unit.runtime_ext import npu_contracts as contract


def npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None):
    contract.check_dynamic_quant(x, smooth_scales, group_index, dst_type)
    if group_index is not None or dst_type == torch.quint4x2:
        raise NotImplementedError("npu_dynamic_quant: MoE groups / int4 output are not emulated")
    xf = x.float() if smooth_scales is None else x.float() * smooth_scales.float()
    scale = xf.abs().amax(dim=-1) / 127.0
    y = torch.round(xf / torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1))
    return y.clamp(-128, 127).to(torch.int8), scale


def npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True):
    contract.check_quantize(input, scales, zero_points, dtype, axis, div_mode)
    if dtype != torch.qint8:
        raise NotImplementedError(f"npu_quantize: output {dtype} is not emulated")
    y = input.float() / scales.float() if div_mode else input.float() * scales.float()
    if zero_points is not None:
        y = y + zero_points.float()
    return torch.round(y).clamp(-128, 127).to(torch.int8)


def npu_linear(input, weight, bias=None):
    contract.check_linear(input, weight, bias)
    out = input.double() @ weight.double().T + (0 if bias is None else bias.double())
    return out.to(input.dtype)


def npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
    contract.check_anti_quant(x, scale, offset, dst_dtype, src_dtype)
    values = _unpack_int4pack(x) if x.dtype == torch.int32 else x
    y = values.float() if offset is None else values.float() + offset.float()
    return (y * scale.float()).to(dst_dtype or torch.float16)


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
    contract.check_quant_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype)
    if x1.dtype != torch.int8 or scale.dtype == torch.int64 or output_dtype in (None, torch.int8):
        raise NotImplementedError("npu_quant_matmul: int4 inputs, int64 scales and int8 output are not emulated")
    acc = torch._int_mm(x1.reshape(-1, x1.shape[-1]), x2.contiguous()).to(torch.float64)  # exact int32 sums
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.to(torch.float64)
    y = acc * scale.to(torch.float64)
    if pertoken_scale is not None:
        y = y * pertoken_scale.to(torch.float64).unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        y = y + bias.to(torch.float64)
    return y.to(output_dtype)


def npu_convert_weight_to_int4pack(weight, inner_k_tiles=0):
    contract.check_convert_weight_to_int4pack(weight, inner_k_tiles)
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
    inner_precise=0,
):
    contract.check_weight_quant_batchmatmul(
        x, weight, antiquant_scale, antiquant_offset, quant_scale, quant_offset, bias, antiquant_group_size
    )
    if quant_scale is not None:
        raise NotImplementedError("npu_weight_quant_batchmatmul: int8 output (quant_scale) is not emulated")
    y = x @ _antiquant_weight(weight, antiquant_scale, antiquant_offset, antiquant_group_size)
    return y if bias is None else y + bias.to(x.dtype)


_WEIGHTS: dict[tuple, tuple] = {}  # (tensor ids/versions) -> (the tensors, held so ids stay unique; the result)


def _antiquant_weight(weight, scale, offset, group_size):
    """(weight + offset) * scale in the scale's (= x's) dtype, memoized per weight: the weights are
    constant after load, and unpacking them on every call would make an engine run too slow."""
    parts = (weight, scale, offset)
    key = tuple((id(t), getattr(t, "_version", 0)) for t in parts) + (group_size,)
    if key not in _WEIGHTS:
        w = (_unpack_int4pack(weight) if weight.dtype == torch.int32 else weight).float()
        s, o = scale.float(), None if offset is None else offset.float()
        if group_size:  # [ceil(K/G), N]: row g applies to rows [gG, (g+1)G) of the weight
            s = s.repeat_interleave(group_size, dim=0)[: w.shape[0]]
            o = None if o is None else o.repeat_interleave(group_size, dim=0)[: w.shape[0]]
        if o is not None:
            w = w + o
        if len(_WEIGHTS) > 1024:
            _WEIGHTS.clear()
        _WEIGHTS[key] = (parts, (w * s).to(scale.dtype))
    return _WEIGHTS[key][1]


def npu_format_cast(x, acl_format):
    contract.check_format_cast(x, acl_format)
    if acl_format not in (2, 29):
        raise NotImplementedError(f"npu_format_cast: only ND (2) and FRACTAL_NZ (29) are emulated, got {acl_format}")
    return x

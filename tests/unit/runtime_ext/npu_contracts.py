"""The documented contracts of the torch_npu ops runtime_ext calls, as checks (a test double's rules).

Each rule cites the torch_npu API page it comes from (hiascend.com "PyTorch" API reference; the
path segment names the torch_npu doc release: ``Pytorch/700`` = torch_npu 7.0.0, ``600`` = 6.0.0,
``60RC3`` = 6.0.RC3, ``60RC2`` = 6.0.RC2). Where the rules differ per product, the Atlas A2/A3
rules are the ones checked (our target: Atlas 800I A2); the Atlas inference series (310P) is
narrower (e.g. no bfloat16) and is not modelled. Where no page states a rule we do not check one,
and the check says so in its comment.

A broken rule raises ``ContractViolation`` naming the op, the argument and the documented rule.
"""

from __future__ import annotations

import math

import torch

PAGE = {
    "npu_dynamic_quant": "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_001228.html",
    "npu_dynamic_quant/A2": "https://hiascend.com/document/detail/zh/Pytorch/60RC3/apiref/apilist/ptaoplist_000784.html",
    "npu_quantize": "https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000843.html",
    "npu_anti_quant": "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000514.html",
    "npu_quant_matmul": "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000172.html",
    "npu_quant_matmul/table": "https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000858.html",
    "npu_weight_quant_batchmatmul": "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000179.html",
    "npu_weight_quant_batchmatmul/group": "https://hiascend.com/document/detail/zh/Pytorch/60RC2/apiref/apilist/ptaoplist_000147.html",
    "npu_weight_quant_batchmatmul/scale": "https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000862.html",
    "npu_weight_quant_batchmatmul/op-plugin": "https://github.com/Ascend/op-plugin/blob/1dd24f253e01e63d1c2375d136e12adc1301074e/docs/context/torch_npu-npu_weight_quant_batchmatmul.md",
    "npu_convert_weight_to_int4pack": "https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000846.html",
    "npu_linear": "https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000803.html",
    "npu_format_cast": "https://hiascend.com/document/detail/zh/Pytorch/60RC3/apiref/apilist/ptaoplist_000725.html",
    # SGLang's NPU KV store (tests/npu_twin/ops.py): op-plugin binds it to ATB's ReshapeAndCacheOperation
    "_npu_reshape_and_cache": "https://www.hiascend.com/document/detail/zh/canncommercial/80RC2/apiref/ascendtbapi/ascendtb_01_0073.html",
    "_npu_reshape_and_cache/op-plugin": "https://gitcode.com/Ascend/op-plugin/blob/master/op_plugin/ops/atb/ReshapeAndCachAtb.cpp",
}
HALF = (torch.float16, torch.bfloat16)


class ContractViolation(Exception):
    """A call that breaks the documented contract of a torch_npu op."""

    def __init__(self, op: str, arg: str, got: str, rule: str, page: str | None = None) -> None:
        self.op, self.arg, self.got, self.rule = op, arg, got, rule
        self.page = PAGE[page or op]
        super().__init__(f"{op}: argument {arg!r} is {got}; documented: {rule} ({self.page})")


def _name(dtype: object) -> str:
    return str(dtype).replace("torch.", "")


def _dtype(op: str, arg: str, t: torch.Tensor, allowed: tuple, page: str | None = None) -> None:
    if t.dtype not in allowed:
        rule = f"dtype in {{{', '.join(_name(d) for d in allowed)}}}"
        raise ContractViolation(op, arg, f"dtype {_name(t.dtype)}", rule, page)


def _require(ok: bool, op: str, arg: str, got: object, rule: str, page: str | None = None) -> None:
    if not ok:
        raise ContractViolation(op, arg, str(got), rule, page)


def check_dynamic_quant(x, smooth_scales=None, group_index=None, dst_type=None) -> None:
    op = "npu_dynamic_quant"
    _dtype(op, "x", x, HALF)  # 7.0.0: x float16/bfloat16
    _require(x.dim() > 1, op, "x", f"{x.dim()}-D", "x must have more than one dimension")
    # 6.0.RC3, Atlas A2: the last dimension of x is at most 11264
    _require(x.shape[-1] <= 11264, op, "x", f"last dim {x.shape[-1]}", "last dim <= 11264 (A2)", "npu_dynamic_quant/A2")
    if smooth_scales is not None:  # 7.0.0: 1-D, the size of x's last dim, x's dtype (single-op mode)
        _require(smooth_scales.dtype == x.dtype, op, "smooth_scales", _name(smooth_scales.dtype), "the dtype of x")
        _require(tuple(smooth_scales.shape) == (x.shape[-1],), op, "smooth_scales", tuple(smooth_scales.shape), "(D,)")
    allowed = (None, torch.int8, torch.quint4x2)  # 7.0.0, A2/A3
    _require(dst_type in allowed, op, "dst_type", dst_type, "None, torch.int8 or torch.quint4x2")


def check_quantize(input, scales, zero_points, dtype, axis, div_mode) -> None:
    op = "npu_quantize"
    _dtype(op, "input", input, (torch.float32, *HALF))  # 6.0.0 A2: FLOAT, FLOAT16, BFLOAT16
    if div_mode:  # 6.0.0 A2, div_mode=True: scales FLOAT/BFLOAT16; zero_points INT8/UINT8/INT32/BFLOAT16
        _dtype(op, "scales", scales, (torch.float32, torch.bfloat16))
        if zero_points is not None:
            _dtype(op, "zero_points", zero_points, (torch.int8, torch.uint8, torch.int32, torch.bfloat16))
        outs = (torch.qint8, torch.quint8, torch.int32)
    else:  # div_mode=False: scales FLOAT/FLOAT16/BFLOAT16, zero_points of the same shape and dtype
        _dtype(op, "scales", scales, (torch.float32, *HALF))
        outs = (torch.qint8, torch.quint4x2)
    _require(dtype in outs, op, "dtype", dtype, f"one of {outs} for div_mode={div_mode}")
    last = input.dim() - 1  # "axis只支持最后一维": only the last axis is element-wise
    _require(axis in (-1, last), op, "axis", axis, "the last dimension of input (only it is supported)")
    # Shape: 1-D with input.shape[axis] or 1 elements. Documented for div_mode=False; applied to
    # div_mode=True too, as the only shape that broadcasts along ``axis`` (an inference, not a quote).
    n = input.shape[last]
    _require(
        scales.dim() == 1 and scales.shape[0] in (1, n), op, "scales", tuple(scales.shape), f"1-D of size 1 or {n}"
    )


def check_linear(input, weight, bias=None) -> None:
    op = "npu_linear"
    mm = (torch.float32, torch.float16, torch.int32, torch.int8)  # 6.0.0: float32, float16, int32, int8
    _dtype(op, "input", input, mm)
    _dtype(op, "weight", weight, mm)
    _require(input.dim() == 2, op, "input", f"{input.dim()}-D", "a 2-D matrix")
    _require(weight.dim() == 2, op, "weight", f"{weight.dim()}-D", "a 2-D matrix")
    # "a * b" with weight [out, in] as in the page's example (x [2, 16], w [4, 16] -> [2, 4])
    _require(weight.shape[1] == input.shape[1], op, "weight", tuple(weight.shape), f"[out, {input.shape[1]}]")
    if bias is not None:  # 1-D float32, float16 or int32
        _dtype(op, "bias", bias, (torch.float32, torch.float16, torch.int32))
        _require(tuple(bias.shape) == (weight.shape[0],), op, "bias", tuple(bias.shape), f"({weight.shape[0]},)")


def check_anti_quant(x, scale, offset=None, dst_dtype=None, src_dtype=None) -> None:
    op = "npu_anti_quant"
    _dtype(op, "x", x, (torch.int8, torch.int32))  # 7.0.0 A2/A3: int8, int32 (8 packed int4)
    _require(x.dim() <= 8, op, "x", f"{x.dim()}-D", "at most 8 dimensions")
    _dtype(op, "scale", scale, (torch.float32, torch.bfloat16))  # A2/A3: float32, bfloat16
    n = x.shape[-1] * (8 if x.dtype == torch.int32 else 1)
    _require(scale.dim() == 1 and scale.shape[0] in (1, n), op, "scale", tuple(scale.shape), f"1-D (n,), n = 1 or {n}")
    if offset is not None:  # same dtype and shape as scale
        same = offset.dtype == scale.dtype and offset.shape == scale.shape
        _require(same, op, "offset", f"{_name(offset.dtype)}{tuple(offset.shape)}", "scale's dtype and shape")
    dst = (None, torch.float16, torch.bfloat16)  # A2/A3: float16, bfloat16 (default float16)
    _require(dst_dtype in dst, op, "dst_dtype", dst_dtype, "None (float16), torch.float16 or torch.bfloat16")
    src = (None, torch.int8, torch.quint4x2)  # A2/A3: quint4x2 or int8 (default int8)
    _require(src_dtype in src, op, "src_dtype", src_dtype, "None (int8), torch.int8 or torch.quint4x2")


# 6.0.0 combination table of npu_quant_matmul (int8 rows): output dtype -> (scale, bias, pertoken_scale, offset)
_QMM_ROWS = {
    "float16": [
        ({torch.int64, torch.float32}, {None, torch.int32}, {None}, {None}),
        ({torch.float32}, {None, torch.int32, torch.float16, torch.float32}, {torch.float32}, {None}),
    ],
    "bfloat16": [
        (
            {torch.float32, torch.bfloat16},
            {None, torch.int32, torch.bfloat16, torch.float32},
            {None, torch.float32},
            {None},
        )
    ],
    "int8": [({torch.int64, torch.float32}, {None, torch.int32}, {None}, {None, torch.float32})],
}


def _dt(t):
    return None if t is None else t.dtype


def check_quant_matmul(x1, x2, scale, offset=None, pertoken_scale=None, bias=None, output_dtype=None) -> None:
    op = "npu_quant_matmul"
    _dtype(op, "x1", x1, (torch.int8, torch.int32))  # 7.0.0 A2/A3: int8, int32 (int4); x2 the same
    _require(x2.dtype == x1.dtype, op, "x2", f"dtype {_name(x2.dtype)}", "the dtype of x1")
    for arg, t in (("x1", x1), ("x2", x2)):
        _require(2 <= t.dim() <= 6, op, arg, f"{t.dim()}-D", "2 to 6 dimensions")
    k_div = 8 if x1.dtype == torch.int32 else 1
    if x1.dtype == torch.int8:
        _require(x1.shape[-1] == x2.shape[-2], op, "x2", tuple(x2.shape), f"(k={x1.shape[-1]}, n): k of x1")
    n, m = x2.shape[-1] * k_div, x1.shape[-2]
    _require(scale.dim() == 1 and scale.shape[0] in (1, n), op, "scale", tuple(scale.shape), f"1-D (t,), t = 1 or {n}")
    if offset is not None:
        _require(offset.dim() == 1 and offset.shape[0] in (1, n), op, "offset", tuple(offset.shape), f"(t,), t=1/{n}")
    if pertoken_scale is not None:
        _require(tuple(pertoken_scale.shape) == (m,), op, "pertoken_scale", tuple(pertoken_scale.shape), f"1-D ({m},)")
    if bias is not None:
        ok = tuple(bias.shape) == (n,) or (bias.dim() == 3 and bias.shape[1:] == (1, n))
        _require(ok, op, "bias", tuple(bias.shape), f"({n},) or (batch, 1, {n})")
    out = {None: "int8", torch.int8: "int8", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    _require(output_dtype in out, op, "output_dtype", output_dtype, "None/torch.int8, torch.float16 or torch.bfloat16")
    got = (_dt(scale), _dt(bias), _dt(pertoken_scale), _dt(offset))
    rows = _QMM_ROWS[out[output_dtype]]
    if x1.dtype == torch.int8 and not any(all(g in allowed for g, allowed in zip(got, row)) for row in rows):
        combo = dict(zip(("scale", "bias", "pertoken_scale", "offset"), map(_name, got)))
        rule = f"a row of the dtype-combination table for output {out[output_dtype]}: {rows}"
        raise ContractViolation(op, "scale/bias/pertoken_scale/offset", str(combo), rule, "npu_quant_matmul/table")


def check_weight_quant_batchmatmul(
    x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None, quant_offset=None, bias=None, group_size=0
) -> None:
    op = "npu_weight_quant_batchmatmul"
    _dtype(op, "x", x, HALF)  # 7.0.0 A2/A3: float16, bfloat16; 2-D (M, K)
    _require(x.dim() == 2, op, "x", f"{x.dim()}-D", "2-D (M, K)")
    _dtype(op, "weight", weight, (torch.int8, torch.int32))  # int8, int32 (8 int4 per element)
    _require(weight.dim() == 2, op, "weight", f"{weight.dim()}-D", "2-D (K, N)")
    k = x.shape[1]
    n = weight.shape[1] * (8 if weight.dtype == torch.int32 else 1)
    _require(weight.shape[0] == k, op, "weight", tuple(weight.shape), f"(K={k}, N) (int32: (K, N/8))")
    # 6.0.0 A2: float16/bfloat16 antiquant_scale must have x's dtype (int64 scales: not used, not modelled)
    _require(antiquant_scale.dtype == x.dtype, op, "antiquant_scale", _name(antiquant_scale.dtype),
             "the dtype of x", "npu_weight_quant_batchmatmul/scale")  # fmt: skip
    shape = tuple(antiquant_scale.shape)
    if group_size:  # 6.0.RC2: per-group scale (ceil_div(K, antiquant_group_size), N)
        ok = 32 <= group_size <= k - 1 and group_size % 32 == 0  # op-plugin: "范围为[32, K-1]且必须是32的倍数"
        _require(ok, op, "antiquant_group_size", group_size, f"a multiple of 32 in [32, K-1={k - 1}]",
                 "npu_weight_quant_batchmatmul/op-plugin")  # fmt: skip
        want = (math.ceil(k / group_size), n)
        _require(shape == want, op, "antiquant_scale", shape, f"{want} per group", "npu_weight_quant_batchmatmul/group")
    else:  # per-tensor (1,)/(1, 1), per-channel (N,)/(1, N)
        _require(
            shape in ((1,), (1, 1), (n,), (1, n)), op, "antiquant_scale", shape, f"(1,), (1, 1), ({n},) or (1, {n})"
        )
    if antiquant_offset is not None:  # op-plugin: dequantized weight = (weight + antiquant_offset) * antiquant_scale
        same = antiquant_offset.dtype == antiquant_scale.dtype and antiquant_offset.shape == antiquant_scale.shape
        _require(same, op, "antiquant_offset", tuple(antiquant_offset.shape), "antiquant_scale's dtype and shape",
                 "npu_weight_quant_batchmatmul/op-plugin")  # fmt: skip
    # bias's dtype: no statement found in the pages read; not checked.
    if bias is not None:
        _require(bias.numel() == n, op, "bias", tuple(bias.shape), f"{n} elements (N)")


def check_convert_weight_to_int4pack(weight, inner_k_tiles=0) -> None:
    op = "npu_convert_weight_to_int4pack"  # 6.0.0: int32, 2-D, contiguous, last dim % 8, values in [-8, 7]
    _dtype(op, "weight", weight, (torch.int32,))
    _require(weight.dim() == 2, op, "weight", f"{weight.dim()}-D", "2-D (k, n) or (n, k)")
    _require(weight.is_contiguous(), op, "weight", "non-contiguous", "a contiguous tensor")
    _require(weight.shape[-1] % 8 == 0, op, "weight", tuple(weight.shape), "last dim a multiple of 8")
    ok = weight.numel() == 0 or (int(weight.min()) >= -8 and int(weight.max()) <= 7)
    _require(ok, op, "weight", "values outside [-8, 7]", "values in the int4 range [-8, 7]")
    _require(inner_k_tiles == 0, op, "inner_k_tiles", inner_k_tiles, "0 (a reserved parameter, unused)")


def check_format_cast(x, acl_format) -> None:
    # 6.0.RC3 (beta API): documents only (self: Tensor, acl_format: int), no dtype/shape rule.
    _require(isinstance(x, torch.Tensor), "npu_format_cast", "self", type(x).__name__, "a Tensor")
    _require(isinstance(acl_format, int), "npu_format_cast", "acl_format", type(acl_format).__name__, "an int")

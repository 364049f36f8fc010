"""The ``torch_npu`` ops SGLang 0.5.23's NPU layers call when it runs a Llama-family decoder (SmolLM2:
``LlamaForCausalLM``) on device npu, emulated under their documented contracts (``OPS``, added to the
twin's ``torch_npu`` by ``ops.py``).

- ``npu_rms_norm(x, gamma, epsilon)`` -> ``(y, rstd)``: ``RMSNorm.forward_npu`` without a residual
  (``layers/layernorm.py``). ``y = x / sqrt(mean(x^2) + eps) * gamma`` over gamma's trailing dims;
  x float16/bfloat16/float32, 2-8 dims (1-8 in the CANN 8 table), gamma the same dtype; rstd float32.
- ``npu_add_rms_norm(x1, x2, gamma, epsilon)`` -> ``(y, rstd, x)``: the same with a residual,
  ``x = x1 + x2`` (SGLang passes the residual as x1), y the RmsNorm of x. x1/x2 one shape, ND.
- ``npu_mrope(positions, query, key, cos_sin_cache, head_size, mrope_section, rotary_mode)`` ->
  ``(query, key)``: ``RotaryEmbedding.forward_npu`` (``layers/rotary_embedding/base.py``) with
  ``mrope_section=[0, 0, 0]``: aclnnRopeWithSinCosCache's rope mode. positions ``[num_tokens]``
  int32/int64; query/key ``[num_tokens, heads * head_size]``; cos_sin_cache ``[max_pos, rotary_dim]``
  (cos half, then sin half) of the query's dtype; each head's first rotary_dim values rotated
  (``half``: neox halves; ``interleave``: even/odd pairs), the rest passed through. The mrope mode
  (2-D positions, a non-zero section) is not emulated: it raises ``NotEmulated``.
- ``npu_swiglu(x, dim=-1)``: ``SiluAndMul.forward_npu`` (``layers/activation.py``): x split in two
  halves along ``dim``, ``silu(a) * b``; float16/bfloat16/float32, 1-8 dims, ``dim``'s size even.

And one kernel of SGLang's NPU kernel package (``sgl_kernel_npu``, Triton), which ``LlamaAttention``
calls in decode instead of ``npu_mrope`` (``models/llama.py`` ``forward_prepare_npu``):

- ``split_qkv_rmsnorm_rope(input, sin, cos, q_hidden_size, kv_hidden_size, head_dim, eps=None, ...,
  is_neox_style)`` -> ``(q, k, v)``: ``input`` ``[tokens, q + 2 * kv]`` split into q, k, v; without
  ``eps`` no norm; q and k rotated per head with the per-token ``sin`` / ``cos`` (``[tokens, ..., rope_dim]``,
  the full rope width: ``get_cos_sin_with_position``), ``x * cos + rotate_half(x) * sin``; v copied.
  The kernel asserts ``head_dim`` is a power of two and ``q_hidden_size % kv_hidden_size == 0``
  (``KERNEL_PAGE``). The norm (``eps``), bias and interleaved rotary forms raise ``NotEmulated``.

Numerics: each computes in float32 and rounds once to the input dtype (the kernels' documented
formula; their internal accumulation order is not documented and not reproduced).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.unit.runtime_ext import npu_contracts as contract

RMS_NORM, ADD_RMS_NORM, SWIGLU, MROPE = "npu_rms_norm", "npu_add_rms_norm", "npu_swiglu", "npu_mrope"
contract.PAGE.update(
    {
        RMS_NORM: "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000860.html",
        f"{RMS_NORM}/IR": "https://www.hiascend.com/document/detail/zh/Pytorch/700/ptmoddevg/trainingmigrguide/performance_tuning_0031.html",
        ADD_RMS_NORM: "https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha001/API/aolapi/context/aclnnAddRmsNorm.md",
        MROPE: "https://gitcode.com/Ascend/op-plugin/blob/master/op_plugin/ops/opapi/RopeWithSinCosCacheKernelNpuOpApi.cpp",
        f"{MROPE}/aclnn": "https://gitcode.com/zhuzemao/ops-transformer_8242/blob/master/posembedding/rope_with_sin_cos_cache/docs/aclnnRopeWithSinCosCache.md",
        f"{MROPE}/golden": "https://gitcode.com/Ascend/op-plugin/blob/master/test/test_custom_ops/test_npu_mrope.py",
        SWIGLU: "https://www.hiascend.com/document/detail/zh/canncommercial/700/foundmodeldev/foundmodeltrain/PT_LMTMOG_000109.html",
    }
)
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _check_norm(op: str, x: torch.Tensor, gamma: torch.Tensor, x_arg: str = "self") -> None:
    contract._dtype(op, x_arg, x, FLOATS)
    contract._require(1 <= x.dim() <= 8, op, x_arg, f"{x.dim()}-D", "1-8 dims")
    contract._require(gamma.dtype == x.dtype, op, "gamma", contract._name(gamma.dtype), f"{x_arg}'s dtype")
    tail = tuple(x.shape[x.dim() - gamma.dim() :])
    ok = gamma.dim() <= x.dim() and tuple(gamma.shape) == tail
    contract._require(ok, op, "gamma", tuple(gamma.shape), f"{x_arg}'s trailing dims {tail}")


def _rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_rms_norm(self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    _check_norm(RMS_NORM, self, gamma)
    return _rms_norm(self, gamma, epsilon)


def npu_add_rms_norm(
    x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    op = ADD_RMS_NORM
    _check_norm(op, x1, gamma, "x1")
    contract._dtype(op, "x2", x2, (x1.dtype,))
    contract._require(x2.shape == x1.shape, op, "x2", tuple(x2.shape), f"x1's shape {tuple(x1.shape)}")
    x = (x1.float() + x2.float()).to(x1.dtype)  # xOut: the sum, in the inputs' dtype
    y, rstd = _rms_norm(x, gamma, epsilon)
    return y, rstd, x


def npu_swiglu(self: torch.Tensor, dim: int = -1) -> torch.Tensor:
    op = SWIGLU
    contract._dtype(op, "x", self, FLOATS)
    contract._require(1 <= self.dim() <= 8, op, "x", f"{self.dim()}-D", "1-8 dims")
    contract._require(self.shape[dim] % 2 == 0, op, "dim", f"size {self.shape[dim]}", "an even size (two halves)")
    a, b = self.float().chunk(2, dim=dim)
    return (F.silu(a) * b).to(self.dtype)


def _check_mrope(positions, query, key, cos_sin_cache, head_size, mrope_section, rotary_mode) -> None:
    from tests.npu_twin.twin import NotEmulated

    op = MROPE
    if positions.dim() != 1 or any(mrope_section or ()):
        raise NotEmulated(f"{op}'s mrope mode (2-D positions, mrope_section {mrope_section}) is not emulated")
    contract._dtype(op, "positions", positions, (torch.int32, torch.int64))
    contract._require(rotary_mode in ("half", "interleave"), op, "rotary_mode", rotary_mode, "half or interleave")
    n = positions.shape[0]
    for arg, t in (("query", query), ("key", key)):
        contract._dtype(op, arg, t, FLOATS)
        ok = t.dim() == 2 and t.shape[0] == n and t.shape[1] % head_size == 0
        contract._require(ok, op, arg, tuple(t.shape), f"[num_tokens={n}, heads * head_size={head_size}]")
    contract._require(key.dtype == query.dtype, op, "key", contract._name(key.dtype), "query's dtype")
    contract._dtype(op, "cos_sin_cache", cos_sin_cache, (query.dtype,))
    rotary_dim = cos_sin_cache.shape[-1]
    ok = cos_sin_cache.dim() == 2 and rotary_dim % 2 == 0 and rotary_dim <= head_size
    contract._require(ok, op, "cos_sin_cache", tuple(cos_sin_cache.shape), f"[max_pos, rotary_dim <= {head_size}]")
    inside = n == 0 or (int(positions.min()) >= 0 and int(positions.max()) < cos_sin_cache.shape[0])
    contract._require(inside, op, "positions", "a position outside the cache", f"in [0, {cos_sin_cache.shape[0]})")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int, neox: bool) -> torch.Tensor:
    t = x.float().view(x.shape[0], -1, head_size)
    rot, rest = t[..., : 2 * cos.shape[-1]], t[..., 2 * cos.shape[-1] :]
    cos, sin = cos[:, None, :], sin[:, None, :]
    if neox:
        a, b = rot.chunk(2, dim=-1)
        rot = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([rot, rest], dim=-1).reshape(x.shape).to(x.dtype)


def npu_mrope(
    positions, query, key, cos_sin_cache, head_size: int, *, mrope_section=None, rotary_mode: str = "half"
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_mrope(positions, query, key, cos_sin_cache, head_size, mrope_section, rotary_mode)
    cos, sin = cos_sin_cache.float().index_select(0, positions.long()).chunk(2, dim=-1)
    neox = rotary_mode == "half"
    return _rotate(query, cos, sin, head_size, neox), _rotate(key, cos, sin, head_size, neox)


SPLIT_QKV = "split_qkv_rmsnorm_rope"
contract.PAGE[SPLIT_QKV] = (
    "https://github.com/sgl-project/sgl-kernel-npu/blob/main/python/sgl_kernel_npu/sgl_kernel_npu/norm/split_qkv_rmsnorm_rope.py"
)


def split_qkv_rmsnorm_rope(
    input, sin, cos, q_hidden_size, kv_hidden_size, head_dim, eps=None, q_weight=None, k_weight=None,
    q_bias=None, k_bias=None, is_neox_style: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    from tests.npu_twin.twin import NotEmulated

    op = SPLIT_QKV
    if eps is not None or q_bias is not None or not is_neox_style:
        raise NotEmulated(f"{op} with a norm, a bias or interleaved rotary is not emulated")
    tokens = input.shape[0]
    contract._require(head_dim & (head_dim - 1) == 0, op, "head_dim", head_dim, "a power of two (KV_BLOCK_SIZE)")
    contract._require(q_hidden_size % kv_hidden_size == 0, op, "q_hidden_size", q_hidden_size, "a multiple of kv")
    width = q_hidden_size + 2 * kv_hidden_size
    contract._require(tuple(input.shape) == (tokens, width), op, "input", tuple(input.shape), f"[tokens, {width}]")
    for arg, t in (("sin", sin), ("cos", cos)):
        rope = t.shape[-1]
        ok = t.numel() == tokens * rope and rope % 2 == 0 and rope <= head_dim
        contract._require(ok, op, arg, tuple(t.shape), f"{tokens} rows of rope_dim <= {head_dim} values")
    q, k, v = input.split([q_hidden_size, kv_hidden_size, kv_hidden_size], dim=-1)
    cos, sin = (t.reshape(tokens, 1, -1).float() for t in (cos, sin))
    return _rope_full(q, cos, sin, head_dim), _rope_full(k, cos, sin, head_dim), v.clone()


def _rope_full(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The kernel's formula: ``rot * cos + cat(-x2, x1) * sin`` on each head's first rope_dim values."""
    t = x.float().view(x.shape[0], -1, head_dim)
    rope = cos.shape[-1]
    rot, rest = t[..., :rope], t[..., rope:]
    x1, x2 = rot.chunk(2, dim=-1)
    roped = rot * cos + torch.cat([-x2, x1], dim=-1) * sin
    return torch.cat([roped, rest], dim=-1).reshape(x.shape).to(x.dtype)


# sgl_kernel_npu's kernels, by the module SGLang imports each from
KERNELS: dict[str, dict[str, Any]] = {"sgl_kernel_npu.norm.split_qkv_rmsnorm_rope": {SPLIT_QKV: split_qkv_rmsnorm_rope}}

OPS: dict[str, Any] = {RMS_NORM: npu_rms_norm, ADD_RMS_NORM: npu_add_rms_norm, SWIGLU: npu_swiglu, MROPE: npu_mrope}

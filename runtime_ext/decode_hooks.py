"""Decode's bfloat16 linear layers, RMSNorm, RoPE and seeded sampling through runtime_ext's compiled CPU
kernels (``runtime_ext.ops.linear_cpu``, ``norm_cpu``, ``sample_cpu``; imports sglang lazily).

Five AROUND hooks, each handing the call to SGLang unchanged unless the kernel takes it:

- ``UnquantizedLinearMethod.apply(layer, x, bias)``: SGLang's method of every unquantized linear
  layer (QKV, O, gate/up, down). SGLang's own CPU route (the AMX ``weight_packed_linear``, when
  the layer was packed for it) is kept: a packed layer is never taken.
- ``LogitsProcessor._compute_lm_head(hidden, lm_head, bias)``: the vocabulary product. Only the
  plain form is taken: a weight, no LoRA wrapper, no quantization method that applies, no bias,
  no float32 lm_head and no RL on-policy cast (each is SGLang's own branch, left to it).
- ``RMSNorm.forward_native(x, residual, post_residual_addition)``: what SGLang's op dispatch runs on
  a CPU without AMX (``sglang.kernels.fused_op``: no platform forward there); taken when the layer
  has none of its variants (a float32 residual, a variance width, an output dtype override, a
  post-residual addend), the same arithmetic in one call.
- ``RotaryEmbedding.forward_native(positions, q, k)``: likewise, taken for the base class's own
  rotation (a subclass with its own ``forward_native``, a precomputed ``sin_cos_cache``, a compiled
  rotation, offsets or a fused KV store go to SGLang), bit for bit the same.
- ``sampler.multinomial_with_seed(logprobs, seed, positions)``: SGLang's seeded Gumbel-max draw, which
  every sampled request takes (runtime_ext seeds them all: ``fixes/sampling_seed.py``); the same
  arithmetic per element, the entries that cannot win skipped.

All are for the CPU engine only: an NPU or CUDA tensor never satisfies ``takes``, and in a process
where SGLang runs on an NPU (``is_npu()``) nothing is taken either: under the torch_npu twin NPU tensors
live on the CPU, and the twin must run SGLang's NPU path as it is (tests/npu_twin).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from runtime_ext.ops import linear_cpu, norm_cpu, sample_cpu

LINEAR_TARGET = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply"
LM_HEAD_TARGET = "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head"
RMSNORM_TARGET = "sglang.srt.layers.layernorm.RMSNorm.forward_native"
ROPE_TARGET = "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.forward_native"
SAMPLE_TARGET = "sglang.srt.layers.sampler.multinomial_with_seed"


@cache
def _npu_engine() -> bool:
    from sglang.srt.utils import is_npu

    return is_npu()


def linear_apply(original: Any, method: Any, layer: Any, x: Any, bias: Any = None) -> Any:
    if not getattr(layer, "use_intel_amx_backend", False) and not _npu_engine():
        out = linear_cpu.try_linear(x, layer.weight, bias)
        if out is not None:
            return out
    return original(method, layer, x, bias)


def _plain_lm_head(processor: Any, lm_head: Any, embedding_bias: Any) -> bool:
    from sglang.srt.layers.logits_processor import should_apply_lm_head_quant_method

    if embedding_bias is not None or not hasattr(lm_head, "weight") or _npu_engine():
        return False
    if hasattr(lm_head, "set_lora") and hasattr(lm_head, "apply_lora"):
        return False
    if should_apply_lm_head_quant_method(lm_head, getattr(lm_head, "quant_method", None)):
        return False
    if getattr(processor, "use_fp32_lm_head", False) or getattr(processor, "rl_on_policy_target", None) is not None:
        return False
    return not getattr(lm_head, "use_intel_amx_backend", False)


def compute_lm_head(
    original: Any, processor: Any, hidden: Any, lm_head: Any, embedding_bias: Any = None, **kwargs: Any
) -> Any:
    if _plain_lm_head(processor, lm_head, embedding_bias):
        logits = linear_cpu.try_linear(hidden, lm_head.weight)
        if logits is not None:
            return logits
    return original(processor, hidden, lm_head, embedding_bias, **kwargs)


def _plain_norm(norm: Any, post_residual_addition: Any) -> bool:
    from sglang.srt.layers import layernorm

    if layernorm._is_cpu_amx_available or post_residual_addition is not None or _npu_engine():
        return False
    if getattr(norm, "fp32_residual", False) or getattr(norm, "override_orig_dtype", None) is not None:
        return False
    return getattr(norm, "variance_size_override", None) is None


def rmsnorm_cpu(original: Any, norm: Any, x: Any, residual: Any = None, post_residual_addition: Any = None, **kw: Any):
    if _plain_norm(norm, post_residual_addition) and x.shape[-1] == norm.hidden_size:
        cast_before = bool(getattr(norm, "cast_x_before_out_mul", False))
        done = norm_cpu.rmsnorm(x, residual, norm.weight.data, norm.variance_epsilon, cast_before)
        if done is not None:
            return done[0] if residual is None else done
    return original(norm, x, residual, post_residual_addition, **kw)


def _plain_rope(rope: Any, offsets: Any, fused: Any) -> bool:
    from sglang.srt.layers.rotary_embedding import base, utils

    if base._is_cpu_amx_available or offsets is not None or fused is not None or hasattr(rope, "sin_cos_cache"):
        return False
    if _npu_engine():
        return False
    if type(rope).forward_native is not base.RotaryEmbedding.forward_native:  # (hooked: the hook's wrapper)
        return False
    cache = getattr(rope, "cos_sin_cache", None)
    plain_rotation = getattr(rope, "_apply_rotary_emb_wrapped", None) is utils.apply_rotary_emb
    return plain_rotation and cache is not None and cache.dim() == 2 and cache.shape[1] == rope.rotary_dim


def rope_cpu(original: Any, rope: Any, positions: Any, q: Any, k: Any, offsets: Any = None, fused: Any = None):
    if _plain_rope(rope, offsets, fused):
        done = norm_cpu.rope(positions, q, k, rope.cos_sin_cache, rope.head_size, rope.is_neox_style)
        if done is not None:
            return done
    return original(rope, positions, q, k, offsets, fused)


def seeded_sample(original: Any, logprobs: Any, seed: Any, positions: Any) -> Any:
    if positions is not None and not _npu_engine():
        drawn = sample_cpu.sample(logprobs, seed, positions)
        if drawn is not None:
            return drawn
    return original(logprobs, seed, positions)


def register(hooks: Any, hook_type: Any) -> None:
    hooks.register(LINEAR_TARGET, linear_apply, hook_type.AROUND)
    hooks.register(LM_HEAD_TARGET, compute_lm_head, hook_type.AROUND)
    hooks.register(RMSNORM_TARGET, rmsnorm_cpu, hook_type.AROUND)
    hooks.register(ROPE_TARGET, rope_cpu, hook_type.AROUND)
    hooks.register(SAMPLE_TARGET, seeded_sample, hook_type.AROUND)

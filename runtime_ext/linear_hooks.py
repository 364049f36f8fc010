"""Decode's bfloat16 linear layers through ``runtime_ext.ops.linear_cpu`` (imports sglang lazily).

Two AROUND hooks, each handing the call to SGLang unchanged unless ``linear_cpu.takes`` it:

- ``UnquantizedLinearMethod.apply(layer, x, bias)``: SGLang's method of every unquantized linear
  layer (QKV, O, gate/up, down). SGLang's own CPU route (the AMX ``weight_packed_linear``, when
  the layer was packed for it) is kept: a packed layer is never taken.
- ``LogitsProcessor._compute_lm_head(hidden, lm_head, bias)``: the vocabulary product. Only the
  plain form is taken: a weight, no LoRA wrapper, no quantization method that applies, no bias,
  no float32 lm_head and no RL on-policy cast (each is SGLang's own branch, left to it).

Both are for the CPU only: an NPU or CUDA tensor never satisfies ``takes`` (the NPU path is
unchanged).
"""

from __future__ import annotations

from typing import Any

from runtime_ext.ops import linear_cpu

LINEAR_TARGET = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply"
LM_HEAD_TARGET = "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head"


def linear_apply(original: Any, method: Any, layer: Any, x: Any, bias: Any = None) -> Any:
    if getattr(layer, "use_intel_amx_backend", False) or not linear_cpu.takes(x, layer.weight, bias):
        return original(method, layer, x, bias)
    return linear_cpu.linear(x, layer.weight, bias)


def _plain_lm_head(processor: Any, lm_head: Any, embedding_bias: Any) -> bool:
    from sglang.srt.layers.logits_processor import should_apply_lm_head_quant_method

    if embedding_bias is not None or not hasattr(lm_head, "weight"):
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
    if _plain_lm_head(processor, lm_head, embedding_bias) and linear_cpu.takes(hidden, lm_head.weight, None):
        return linear_cpu.linear(hidden, lm_head.weight)
    return original(processor, hidden, lm_head, embedding_bias, **kwargs)


def register(hooks: Any, hook_type: Any) -> None:
    hooks.register(LINEAR_TARGET, linear_apply, hook_type.AROUND)
    hooks.register(LM_HEAD_TARGET, compute_lm_head, hook_type.AROUND)

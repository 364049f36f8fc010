"""Which loader reads an exported checkpoint, and in what tensor layout (pure logic: no torch, no sglang).

``structserve quant export --target T`` writes, per quantized linear layer ``L`` (N = out, K = in),
exactly the tensors ``LAYOUTS[T][scheme]`` names; a scheme the target cannot load is refused with
``TargetError``. Every upstream fact is cited (file and symbol, pinned version) in docs/ascend.md:

- ``structserve``: our own loader (``structserve_modelslim``, runtime_ext/quant/checkpoint_method.py);
  all three schemes; scales float32, W8A16/W4A16 group-wise, W4A16 unpacked int8 in [-8, 7].
- ``sglang-npu``: SGLang 0.5.23 ``ModelSlimConfig`` (``--quantization modelslim``). Its linear schemes
  (``get_linear_scheme``) are W4A4_DYNAMIC, W8A8, W8A8_DYNAMIC, W8A8_MXFP8, W4A8_MXFP, W4A4_MXFP4; of
  ours only W8A8_DYNAMIC (``ModelSlimW8A8Int8.create_weights``: weight int8 [N, K], weight_scale and
  weight_offset [N, 1] in params_dtype).
- ``vllm-ascend``: vllm-ascend v0.23.0 ``AscendModelSlimConfig``: linear W8A8_DYNAMIC
  (``AscendW8A8DynamicLinearMethod``) and W8A16 (``AscendW8A16LinearMethod``), both per channel:
  weight int8 [N, K], weight_scale/weight_offset [N, 1] in params_dtype. Its W4A16 is a MoE-only scheme.

``params_dtype`` is the model's dtype; we write the checkpoint's ``torch_dtype`` (SGLang's and vLLM's
``--dtype auto``); with another ``--dtype`` the loaders' ``copy_`` casts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Target = Literal["structserve", "sglang-npu", "vllm-ascend"]
TARGETS: tuple[Target, ...] = get_args(Target)
MODELSLIM, OURS = "modelslim", "structserve_modelslim"


class TargetError(ValueError):
    """A scheme the chosen export target cannot load (names what it can load and what to change)."""


@dataclass(frozen=True)
class Layout:
    """The tensors of one quantized linear layer, as the target's loader creates its parameters."""

    type: str  # the quant_model_description.json value
    per_channel: bool  # scale [N, 1]; else group-wise [N, ceil(K / group_size)]
    scale_dtype: Literal["float32", "params"]  # "params": the checkpoint's torch_dtype
    int4_unpacked: bool = False  # W4A16: int8 [N, K] holding values in [-8, 7]

    def scale_shape(self, n: int, k: int, group_size: int) -> list[int]:
        return [n, 1] if self.per_channel else [n, -(-k // group_size)]


LAYOUTS: dict[Target, dict[str, Layout]] = {
    "structserve": {
        "w8a8_dynamic": Layout("W8A8_DYNAMIC", True, "float32"),
        "w8a16": Layout("W8A16", False, "float32"),
        "w4a16": Layout("W4A16", False, "float32", int4_unpacked=True),
    },
    "sglang-npu": {"w8a8_dynamic": Layout("W8A8_DYNAMIC", True, "params")},
    "vllm-ascend": {
        "w8a8_dynamic": Layout("W8A8_DYNAMIC", True, "params"),
        "w8a16": Layout("W8A16", True, "params"),
    },
}
LOADER = {
    "structserve": "structserve_modelslim (runtime_ext/quant/checkpoint_method.py)",
    "sglang-npu": "SGLang 0.5.23 ModelSlimConfig (--quantization modelslim)",
    "vllm-ascend": "vllm-ascend v0.23.0 AscendModelSlimConfig",
}
WHY_NOT = {
    ("sglang-npu", "w8a16"): "ModelSlimConfig.get_linear_scheme has no W8A16 linear scheme",
    ("sglang-npu", "w4a16"): "ModelSlimConfig.get_linear_scheme has no W4A16 linear scheme",
    ("vllm-ascend", "w4a16"): "its W4A16 scheme is registered for MoE layers only (no linear W4A16)",
}
UPSTREAM_LINEAR_TYPES = {
    "sglang-npu": "W4A4_DYNAMIC, W8A8, W8A8_DYNAMIC, W8A8_MXFP8, W4A8_MXFP, W4A4_MXFP4",
    "vllm-ascend": "W4A4_DYNAMIC, W4A4_FLATQUANT_DYNAMIC, W4A4_MXFP4, W4A4_MXFP4_FLATQUANT, W4A8_DYNAMIC, W4A8_MXFP, "
    "W8A16, W8A8, W8A8_DYNAMIC, W8A8_MIX, W8A8_MXFP8, W8A8FP8_DYNAMIC",
}


def layout(target: str, scheme: str) -> Layout:
    """The layout ``target`` loads for ``scheme``, or ``TargetError`` saying what it can load instead."""
    if target not in LAYOUTS:
        raise TargetError(f"unknown export target {target!r}; valid: {', '.join(TARGETS)}")
    found = LAYOUTS[target].get(scheme)
    if found is None:
        ours = ", ".join(LAYOUTS[target])
        upstream = UPSTREAM_LINEAR_TYPES.get(target)
        raise TargetError(
            f"target {target} ({LOADER[target]}) cannot load {scheme}: "
            f"{WHY_NOT.get((target, scheme), 'no such scheme')}"
            + (f" (its linear types: {upstream})" if upstream else "")
            + f". Of our schemes it loads: {ours}. Export {scheme} with --target structserve"
            f" (served by structserve_modelslim), or pick --scheme {ours.split(', ')[0]}."
        )
    return found


def description_types(description: dict[str, object]) -> set[str]:
    """The quantization types of a description's linear-layer entries (``<layer>.weight``)."""
    return {v for k, v in description.items() if isinstance(k, str) and k.endswith(".weight") and isinstance(v, str)}


def serving_method(
    on_npu: bool, description_types: set[str], stage_aware: bool = False, user_quant: str | None = None
) -> str:
    """Who serves a modelslim checkpoint: SGLang's own ``modelslim`` method where it exists (on an NPU,
    every quantized layer of a type it loads, no stage-aware decode copy asked for), else ours.

    ``description_types``: the values of the ``<layer>.weight`` entries (``FLOAT`` for kept layers).
    An explicit ``quantization=structserve_modelslim`` always gets ours; off-NPU ours always (SGLang's
    modelslim kernels are NPU ops).
    """
    if user_quant == OURS or not on_npu or stage_aware:
        return OURS
    upstream = {lay.type for lay in LAYOUTS["sglang-npu"].values()} | {"FLOAT"}
    return MODELSLIM if description_types <= upstream else OURS

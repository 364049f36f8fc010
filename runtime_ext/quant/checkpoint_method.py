"""Serving msModelSlim-layout checkpoints (``modelslim.py``) with our linear methods (imports sglang).

``structserve_modelslim`` reads ``quant_model_description.json`` (SGLang finds the file and
passes it to ``from_config``). Each linear module gets the scheme of its description entry
(the parts of a fused module must agree): its int8 weight and float32 scale/offset are
loaded as they are (a non-zero offset: asymmetric weight-only, ``modelslim.OFFSET_SIGN``), then
prepared exactly like online quantization (``process_weights_after_loading`` of
``StructserveLinearMethod``; the stage-aware decode copy in the model's dtype), so export -> load
equals quantizing at load. ``FLOAT`` layers load in high precision. Who serves a modelslim checkpoint
is ``targets.serving_method``: ours off-NPU (SGLang's own modelslim method needs NPU ops) and on an
NPU wherever SGLang has no scheme for a described type (W8A16, W4A16) or stage-aware decode is asked
for; SGLang's ``modelslim`` otherwise. ``quantization=structserve_modelslim`` always gets ours.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.layers.linear import LinearBase
from sglang.srt.utils import set_weight_attrs

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.ops import get_op, quant_ref
from runtime_ext.ops.kv_ref import pack_int4
from runtime_ext.quant import modelslim, targets
from runtime_ext.quant.policy import QuantPolicy, shards
from runtime_ext.quant.sglang_methods import (
    ConfigBase,
    KeptLinearMethod,
    StructserveLinearMethod,
    _stored_bytes,
    add_method,
)
from runtime_ext.state import QuantStats

NAME = targets.OURS  # "structserve_modelslim"


class CheckpointLinearMethod(StructserveLinearMethod):
    """A linear layer whose quantized tensors come from the checkpoint."""

    def create_weights(
        self,
        layer,
        input_size_per_partition,
        output_partition_sizes,
        input_size,
        output_size,
        params_dtype,
        **extra_weight_attrs,
    ) -> None:
        n, k = sum(output_partition_sizes), input_size_per_partition
        layer.compute_dtype = params_dtype  # the model's dtype: the stage-aware decode copy is made in it
        cols = 1 if self.policy.scheme == "w8a8_dynamic" else -(-k // self.policy.group_size)
        weight = torch.nn.Parameter(torch.empty(n, k, dtype=torch.int8), requires_grad=False)
        layer.register_parameter("weight", weight)
        set_weight_attrs(weight, {"input_dim": 1, "output_dim": 0, **extra_weight_attrs})
        for side in modelslim.SIDE_TENSORS:  # NaN until loaded: a missing tensor cannot pass unnoticed
            param = torch.nn.Parameter(torch.full((n, cols), float("nan"), dtype=torch.float32), requires_grad=False)
            layer.register_parameter(side, param)
            set_weight_attrs(param, {"output_dim": 0, **({"input_dim": 1} if cols > 1 else {}), **extra_weight_attrs})

    def _quantize(self, layer) -> None:
        prefix = self.prefix
        if bool(torch.isnan(layer.weight_scale).any() or torch.isnan(layer.weight_offset).any()):
            raise modelslim.CheckpointError(f"layer {prefix}: weight_scale/weight_offset missing from the checkpoint")
        if self.policy.scheme == "w8a8_dynamic" and bool(layer.weight_offset.any()):
            raise modelslim.CheckpointError(
                f"layer {prefix}: W8A8_DYNAMIC weights must be symmetric (weight_offset 0); "
                "asymmetric weights are supported for W8A16 and W4A16"
            )
        q, scale, device = layer.weight.data, layer.weight_scale.data, layer.weight.device.type
        before = q.shape[0] * q.shape[1] * 2  # the same weights in bf16
        if self.policy.scheme == "w8a8_dynamic":
            layer.wq_t, layer.w_scale = get_op("w8a8_prepare", device)(q, scale[:, 0])
            if self.policy.stage_aware:
                layer.decode_weight = quant_ref.dequantize_weight_per_channel(q, scale[:, 0], layer.compute_dtype)
        else:
            stored = pack_int4(q) if self.policy.bits == 4 else q
            offset = modelslim.OFFSET_SIGN * layer.weight_offset.data  # all zero (symmetric): dropped at prepare
            layer.prepared = get_op("weight_only_prepare", device)(
                stored, scale, self.policy.bits, self.policy.group_size, offset
            )
        del layer.weight, layer.weight_scale, layer.weight_offset
        self.stats.quantized += 1
        self.stats.count_bytes(_stored_bytes(layer), before)


class StructserveModelSlimConfig(ConfigBase):
    quant_stats: QuantStats  # set on the class ``register`` builds (the plugin's per-process stats)
    runtime = RuntimeExtConfig()  # the plugin's config, set on the class ``register`` builds

    def __init__(self, description: dict) -> None:
        super().__init__()
        self.types = modelslim.layer_types(description)
        self.group_size = int(description.get("group_size") or 128)
        self.stage_aware = _stage_aware(self.runtime)

    @classmethod
    def get_name(cls) -> str:
        return NAME

    @staticmethod
    def get_config_filenames() -> list[str]:
        return [modelslim.DESCRIPTION]

    @classmethod
    def from_config(cls, config: dict) -> "StructserveModelSlimConfig":
        return cls(config)

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg: Any, user_quant: Any) -> str | None:
        """Who serves a modelslim checkpoint: ``targets.serving_method`` (SGLang's own ``modelslim`` on an
        NPU when it loads every type in the description, ours otherwise and always off-NPU)."""
        from sglang.srt.utils import is_npu

        if not isinstance(hf_quant_cfg, dict) or hf_quant_cfg.get("quant_method") != "modelslim":
            return None
        if user_quant not in (None, "modelslim", NAME):
            return None
        stage_aware = _stage_aware(cls.runtime)
        return targets.serving_method(is_npu(), targets.description_types(hf_quant_cfg), stage_aware, user_quant)

    def get_quant_method(self, layer: Any, prefix: str) -> Any:
        if not isinstance(layer, LinearBase):
            return None
        kinds = {self.types.get(name) for name in shards(prefix)}
        if None in kinds or len(kinds) != 1:
            raise modelslim.CheckpointError(
                f"layer {prefix}: its parts {shards(prefix)} must all be described "
                f"with one type in {modelslim.DESCRIPTION}, found {sorted(map(str, kinds))}"
            )
        scheme = kinds.pop()
        if scheme == modelslim.FLOAT:
            return KeptLinearMethod(self.quant_stats)
        return CheckpointLinearMethod(QuantPolicy(scheme, self.group_size, self.stage_aware), self.quant_stats, prefix)


def _stage_aware(runtime: RuntimeExtConfig) -> bool:
    return runtime.quant_policy.stage_aware if runtime.quant_policy is not None else False


def register(stats: QuantStats, runtime: RuntimeExtConfig) -> None:
    """``runtime``: the plugin's config (``plugin.register()`` reads it once per process)."""
    attrs = {"quant_stats": stats, "runtime": runtime}
    add_method(type(StructserveModelSlimConfig.__name__, (StructserveModelSlimConfig,), attrs))

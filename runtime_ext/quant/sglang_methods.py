"""The quantized linear schemes as SGLang quantization methods (imports sglang and torch).

``register`` adds ``structserve_w8a8_dynamic``, ``structserve_w8a16`` and ``structserve_w4a16``
to SGLang's ``QUANTIZATION_METHODS`` (and the CLI choices). Online quantization: the loader
fills an ordinary high-precision weight, ``process_weights_after_loading`` quantizes it through
the ops dispatch table and frees it. The policy (group size, stage-aware, layers kept in high
precision) is ``RuntimeExtConfig.quant_policy`` (set by the service). Counters go to the
``QuantStats`` the plugin hands to ``register``.

Only linear layers (q/k/v/o, gate/up/down) are quantized; embeddings and lm_head get no method
(SGLang keeps them unquantized) and norms never ask. A fused module (qkv, gate_up) has one scheme.

Stage-aware W8A8 (``stage_aware: true``): prefill (extend) runs the INT8 matmul; decode reads a
dequantized copy made once at load, in the model's dtype (``params_dtype`` of ``create_weights``).
The phase comes from an AROUND hook on ``ModelRunner._forward_raw`` that records the batch's
forward mode.
"""

from __future__ import annotations

import contextvars
from typing import Any

import torch
from sglang.srt.layers.linear import LinearBase
from sglang.srt.layers.quantization.base_config import LinearMethodBase, QuantizationConfig
from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.ops import get_op
from runtime_ext.quant.policy import SCHEMES, QuantPolicy, Scheme, keeps_high_precision
from runtime_ext.quant.request_rows import mixed_rows
from runtime_ext.state import QuantStats

PREFIX = "structserve_"
FORWARD_TARGET = "sglang.srt.model_executor.model_runner.ModelRunner._forward_raw"
_MODE: contextvars.ContextVar[Any] = contextvars.ContextVar("structserve_forward_mode", default=None)


def is_decode() -> bool:
    mode = _MODE.get()
    return mode is not None and mode.is_decode()


def _forward_hook(stats: QuantStats) -> Any:
    """The AROUND hook on ``ModelRunner._forward_raw``: records the batch's forward mode (for
    stage-aware W8A8); with the monitor on, reloads a changed sensitive-layers file before the
    step and reads the step's statistics after it (``FallbackController``)."""

    def around_forward(original: Any, self: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        monitor = stats.monitor
        if monitor is not None:
            monitor.begin_step(forward_batch)
        token = _MODE.set(forward_batch.forward_mode)
        try:
            out = original(self, forward_batch, *args, **kwargs)
        finally:
            _MODE.reset(token)
        if monitor is not None:
            monitor.step_end(forward_batch)
        return out

    return around_forward


class KeptLinearMethod(UnquantizedLinearMethod):
    """A linear layer the policy keeps in high precision (counted in the report)."""

    def __init__(self, stats: QuantStats) -> None:
        super().__init__()
        self.stats = stats

    def process_weights_after_loading(self, layer) -> None:
        super().process_weights_after_loading(layer)
        self.stats.kept += 1
        size = layer.weight.numel() * layer.weight.element_size()
        self.stats.count_bytes(size, size)


class StructserveLinearMethod(LinearMethodBase):
    """``starts_high``: the policy keeps this module, but the monitor's standby plan holds it
    (quantized too, served from its high-precision weight until a reload moves it to INT8)."""

    def __init__(self, policy: QuantPolicy, stats: QuantStats, prefix: str = "?", starts_high: bool = False) -> None:
        self.policy, self.stats, self.prefix, self.starts_high = policy, stats, prefix, starts_high

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
        UnquantizedLinearMethod().create_weights(
            layer,
            input_size_per_partition,
            output_partition_sizes,
            input_size,
            output_size,
            params_dtype,
            **extra_weight_attrs,
        )
        layer.compute_dtype = params_dtype  # the model's dtype: the stage-aware decode copy is made in it

    def process_weights_after_loading(self, layer) -> None:
        try:
            self._quantize(layer)
        except ValueError as exc:
            raise ValueError(f"cannot quantize layer {self.prefix} with {self.policy.scheme}: {exc}") from exc

    def _quantize(self, layer) -> None:
        from runtime_ext.ops import quant_ref

        w = layer.weight.data
        device, dtype = w.device.type, layer.compute_dtype
        before = w.numel() * w.element_size()
        if self.policy.scheme == "w8a8_dynamic":
            q, scale = quant_ref.quantize_weight_per_channel(w)
            layer.wq_t, layer.w_scale = get_op("w8a8_prepare", device)(q, scale)
            if self.policy.stage_aware:  # decode reads this copy: made once here, never per token
                layer.decode_weight = quant_ref.dequantize_weight_per_channel(q, scale, dtype)
        else:
            q, scale = quant_ref.quantize_weight_groupwise(w, self.policy.bits, self.policy.group_size)
            layer.prepared = get_op("weight_only_prepare", device)(q, scale, self.policy.bits, self.policy.group_size)
        monitor = self.stats.monitor
        standby = monitor is not None and monitor.attach(layer, self.prefix, self.starts_high)
        del layer.weight  # only the quantized tensors stay (and the monitor's standby copy, if planned)
        self.stats.quantized += 1
        self.stats.count_bytes(_stored_bytes(layer) + (before if standby else 0), before)

    def apply(self, layer, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        monitor = self.stats.monitor
        if monitor is not None:
            monitor.observe(layer, x2)
        if getattr(layer, "use_standby", False):  # the monitor switched it (between two forwards)
            self.stats.standby_calls += 1
            y = torch.nn.functional.linear(x2, layer.standby_weight, bias)
        else:
            y = self._quantized(layer, x2, bias)
            mask = monitor.row_mask(x2.shape[0]) if monitor is not None else None
            if mask is not None and hasattr(layer, "standby_weight"):  # flagged requests' rows
                self.stats.standby_rows_calls += 1
                y = mixed_rows(y, x2, layer.standby_weight, bias, mask)
        return y.reshape(*shape[:-1], y.shape[-1])

    def _quantized(self, layer, x2: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        device = x2.device.type
        if self.policy.scheme != "w8a8_dynamic":
            return get_op("weight_only_matmul", device)(x2, layer.prepared, bias)
        if getattr(layer, "decode_weight", None) is not None and is_decode():
            self.stats.copy_calls += 1
            return torch.nn.functional.linear(x2, layer.decode_weight, bias)
        self.stats.int8_calls += 1
        return get_op("w8a8_matmul", device)(x2, layer.wq_t, layer.w_scale, bias)


def _stored_bytes(layer) -> int:
    tensors = [getattr(layer, name, None) for name in ("wq_t", "w_scale", "decode_weight")]
    tensors += [t for t in getattr(layer, "prepared", {}).values() if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class ConfigBase(QuantizationConfig):
    """What our quantization configs share: any float activation dtype, no GPU capability."""

    def get_supported_act_dtypes(self) -> list:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return 0

    def get_scaled_act_names(self) -> list[str]:
        return []


def add_method(cls: type) -> None:
    """Register a config class under its name with SGLang (registry and CLI choices)."""
    import sglang.srt.layers.quantization as quantization
    from sglang.srt.arg_groups.choices import (
        QUANTIZATION_CHOICES,
        add_quantization_method_choices,
    )

    quantization.QUANTIZATION_METHODS[cls.get_name()] = cls
    quantization.CPU_QUANTIZATION_METHODS[cls.get_name()] = cls
    if cls.get_name() not in QUANTIZATION_CHOICES:
        add_quantization_method_choices([cls.get_name()])


def _config_class(scheme: Scheme, stats: QuantStats, runtime: RuntimeExtConfig) -> type:
    class StructserveQuantConfig(ConfigBase):
        SCHEME = scheme

        def __init__(self) -> None:
            super().__init__()
            policy = runtime.quant_policy or QuantPolicy(scheme)
            if policy.scheme != scheme:
                policy = QuantPolicy(scheme, policy.group_size, policy.stage_aware, policy.keep)
            self.policy = policy
            monitor = runtime.quant_monitor
            if monitor is not None and monitor.enabled and stats.monitor is None:
                from runtime_ext.quant.fallback import FallbackController

                stats.monitor = FallbackController(monitor)

        @classmethod
        def get_name(cls) -> str:
            return PREFIX + cls.SCHEME

        @staticmethod
        def get_config_filenames() -> list[str]:
            return []  # online quantization of a high-precision checkpoint

        @classmethod
        def from_config(cls, config: dict) -> "StructserveQuantConfig":
            return cls()

        def get_quant_method(self, layer: Any, prefix: str) -> Any:
            if not isinstance(layer, LinearBase):
                return None  # embeddings, lm_head: unquantized
            standby = stats.monitor is not None and prefix in stats.monitor.config.standby
            if keeps_high_precision(prefix, self.policy):
                if standby:  # quantized too: a reload may move it to INT8
                    return StructserveLinearMethod(self.policy, stats, prefix, starts_high=True)
                return KeptLinearMethod(stats)
            return StructserveLinearMethod(self.policy, stats, prefix)

    StructserveQuantConfig.__name__ = f"Structserve_{scheme}_Config"
    return StructserveQuantConfig


def register(hooks: Any, hook_type: Any, stats: QuantStats, runtime: RuntimeExtConfig) -> None:
    """``runtime``: the plugin's config (``plugin.register()`` reads it once per process)."""
    for scheme in SCHEMES:
        add_method(_config_class(scheme, stats, runtime))
    hooks.register(FORWARD_TARGET, _forward_hook(stats), hook_type.AROUND)

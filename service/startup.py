"""Startup: read the model directory once (``ModelInfo``), then build what the engine needs
from the settings and that record, one way down (``main`` → here → runtime_ext's pure helpers).

``prepare_engine`` runs the stages in order and writes the one channel to the scheduler
processes (``RuntimeExtConfig.export``) before the engine starts:

1. KV cache: the static C8 modes need a calibration file made for this model (a startup
   error otherwise). ``engine.kv_cache_bytes`` (when set) is a KV memory budget: the pool
   gets as many whole pages as fit at the selected mode's bytes per token
   (``runtime_ext.kv_cache.sizing``), so at one budget C8 holds ~1.9-2x the tokens of bf16.
   Otherwise ``engine.max_total_tokens``.
2. Quantized linear layers: ``quantization: w8a8_dynamic | w8a16 | w4a16`` selects runtime_ext's
   SGLang method ``structserve_<scheme>`` (online quantization of the checkpoint's weights at
   load). The layers kept in high precision are ``quant.ignore`` plus the ``layers`` of
   ``quant.sensitive_layers`` (a file from ``structserve quant scan``); every name must be a
   linear layer of the model, else the server does not start (the error names the layer).
   A checkpoint with its own ``quant_model_description.json`` (msModelSlim layout, e.g. from
   ``structserve quant export``) takes precedence: it is checked (types, tensors, shapes, group
   size; errors name the layer) and passed as ``modelslim``: the plugin's override
   (``runtime_ext.quant.targets.serving_method``) serves it with ``structserve_modelslim`` off-NPU
   and wherever SGLang's own modelslim method has no scheme for it, with SGLang's otherwise.
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grammars.compile import VocabFacts
from runtime_ext.config import RuntimeExtConfig, resolve_rotation
from runtime_ext.kv_cache.calibration import Calibration, load_calibration
from runtime_ext.kv_cache.sizing import cell_bytes, tokens_for_budget
from runtime_ext.quant import modelslim
from runtime_ext.quant.monitor import MonitorConfig, MonitorConfigError, kl_ranking, modules_listed, standby_plan
from runtime_ext.quant.policy import GROUP_SIZES, QuantPolicy, check_keep, fused_module, linear_layer_names
from runtime_ext.quant.sensitivity import load_scores, load_sensitive_layers
from service.engine import EngineOptions
from service.settings import EngineSettings, Settings

log = logging.getLogger(__name__)
STATIC_MODES = ("c8_static", "c8_static_residual")
TensorShapes = Mapping[str, tuple[list[int], str]]  # name -> (shape, safetensors dtype)


@dataclass(frozen=True)
class ModelInfo:
    """What serving needs to know about the model directory, read once (``read``)."""

    path: Path
    model_type: str | None
    kv_shape: tuple[int, int, int] | None  # (layers, kv_heads, head_dim); None if config.json lacks them
    tensors: TensorShapes  # every safetensors tensor: name -> (shape, dtype)
    quant_description: dict | None  # the msModelSlim quant_model_description.json, if any
    vocab: VocabFacts  # vocab size and EOS ids, as the grammar compiler's tokenizer info takes them

    @classmethod
    def read(cls, model_dir: Path) -> ModelInfo:
        path = model_dir / "config.json"
        config = json.loads(path.read_text()) if path.is_file() else {}
        return cls(
            path=model_dir,
            model_type=config.get("model_type"),
            kv_shape=_kv_shape(config),
            tensors=_tensor_shapes(model_dir),
            quant_description=modelslim.read(model_dir),
            vocab=VocabFacts.from_config(config),
        )

    def require_kv_shape(self) -> tuple[int, int, int]:
        if self.kv_shape is None:
            raise ValueError(
                f"{self.path}/config.json lacks the KV shape (num_hidden_layers, num_attention_heads, hidden_size)"
            )
        return self.kv_shape


def _kv_shape(config: dict[str, Any]) -> tuple[int, int, int] | None:
    """(layers, kv_heads, head_dim) from a HF ``config.json``."""
    try:
        heads = config.get("num_key_value_heads") or config["num_attention_heads"]
        dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        return config["num_hidden_layers"], heads, dim
    except KeyError:
        return None


def _tensor_shapes(model_dir: Path) -> dict[str, tuple[list[int], str]]:
    """Names, shapes and dtypes of every tensor in the ``*.safetensors`` files (headers only)."""
    shapes = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, meta in header.items():
            if name != "__metadata__":
                shapes[name] = (list(meta["shape"]), meta["dtype"])
    return shapes


def check_kv_cache(settings: Settings, info: ModelInfo) -> Calibration | None:
    """The static modes need a calibration file made for this model (a startup error
    otherwise); the scheduler process gets its path in ``RuntimeExtConfig``. Returns it (or None).
    A rotated C8 cache needs a head dim that has a Hadamard matrix (a power of two)."""
    rotation = resolve_rotation(settings.kv_rotation, settings.kv_cache)
    if settings.kv_cache != "bf16" and rotation != "none":
        dim = info.require_kv_shape()[2]
        if dim & (dim - 1):
            raise ValueError(
                f"kv_rotation {settings.kv_rotation} ({rotation} for {settings.kv_cache}) needs a power-of-two head "
                f"dim (Hadamard), the model's is {dim}: set kv_rotation: none (STRUCTSERVE_KV_ROTATION=none)"
            )
    if settings.kv_cache not in STATIC_MODES:
        return None
    if settings.kv_calibration is None:
        raise ValueError(
            f"kv_cache {settings.kv_cache} needs kv_calibration (STRUCTSERVE_KV_CALIBRATION): a file "
            "from `structserve kv calibrate --model ... --out FILE`"
        )
    return load_calibration(settings.kv_calibration, *info.require_kv_shape(), rotation)


def pool_tokens(settings: Settings, info: ModelInfo, calib: Calibration | None = None) -> int:
    """KV pool size in tokens: from the byte budget when one is set."""
    budget = settings.engine.kv_cache_bytes
    if budget is None:
        return settings.engine.max_total_tokens
    layers, heads, dim = info.require_kv_shape()
    cell = cell_bytes(settings.kv_cache, layers, heads, dim, calib.outlier_rate if calib else 0.0)
    return tokens_for_budget(budget, cell, settings.engine.page_size)


_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "BF16": 2, "F16": 2, "F32": 4}


def monitor_setup(
    settings: Settings, info: ModelInfo, method: str | None, policy: QuantPolicy | None
) -> MonitorConfig | None:
    """The scheduler's monitor config (None when off) with its standby plan, logged with its
    bytes. It needs online quantization: a pre-quantized checkpoint has no high-precision
    weights to fall back to."""
    m, q = settings.quant.monitor, settings.quant
    if not m.enabled:
        return None
    if policy is None or method is None or not method.startswith("structserve_"):
        raise MonitorConfigError(
            "quant.monitor needs online quantization (quantization: w8a8_dynamic | w8a16 | w4a16 on a "
            "high-precision checkpoint); this model is "
            + ("pre-quantized: it has no high-precision weights to fall back to" if method else "not quantized")
        )
    sizes = module_bytes(info, settings.dtype)
    scores = load_scores(q.sensitive_layers) if q.sensitive_layers else {}
    kept = modules_listed(policy.keep, sizes)
    standby, kept_bytes, extra = standby_plan(sizes, kept, kl_ranking(sizes, scores), m.max_fallback_bytes)
    log.info(
        "quant.monitor: %d modules can fall back: %d kept layers (%.1f MiB, served from it) + %d by the scan's "
        "ranking within max_fallback_bytes (%.1f MiB of %.1f)",
        len(standby),
        len(kept),
        kept_bytes / 2**20,
        len(standby) - len(kept),
        extra / 2**20,
        m.max_fallback_bytes / 2**20,
    )
    return MonitorConfig(
        enabled=True,
        **m.model_dump(exclude={"enabled", "events_path"}),
        sensitive_layers=str(q.sensitive_layers.resolve()) if q.sensitive_layers else None,
        events_path=str(m.events_path.resolve()) if m.events_path else None,
        standby=standby,
    )


def module_bytes(info: ModelInfo, dtype: str) -> dict[str, int]:
    """Bytes of each quantizable SGLang module's weight (fused shards summed) in the serving dtype."""
    out: dict[str, int] = {}
    for layer in sorted(linear_layer_names(list(info.tensors))):
        shape, stored = info.tensors[f"{layer}.weight"]
        module = fused_module(layer)[0]
        out[module] = out.get(module, 0) + math.prod(shape) * _DTYPE_BYTES.get(dtype, _DTYPE_BYTES.get(stored, 2))
    return out


def quant_setup(settings: Settings, info: ModelInfo) -> tuple[str | None, QuantPolicy | None]:
    """The SGLang quantization name to pass (None for ``none``) and the policy for the scheduler."""
    description = info.quant_description
    if description is not None:
        modelslim.check_tensors(description, info.tensors, GROUP_SIZES)
        if settings.quantization != "none":
            log.warning(
                "%s has its own %s: serving it as described (quantization=%s ignored)",
                info.path,
                modelslim.DESCRIPTION,
                settings.quantization,
            )
        return "modelslim", QuantPolicy("w8a8_dynamic", stage_aware=settings.quant.stage_aware)
    if settings.quantization == "none":
        return None, None
    q = settings.quant
    keep = list(q.ignore)
    if q.sensitive_layers is not None:
        keep += load_sensitive_layers(q.sensitive_layers)
    check_keep(keep, linear_layer_names(list(info.tensors)))
    return f"structserve_{settings.quantization}", QuantPolicy(
        settings.quantization, q.group_size, q.stage_aware, tuple(keep)
    )


@dataclass(frozen=True)
class EngineSetup:
    options: EngineOptions
    runtime: RuntimeExtConfig  # what the scheduler processes read


def fast_forward_engine(fast_forward: bool, engine: EngineSettings) -> EngineSettings:
    """``engine`` as grammar fast-forward needs it (runtime_ext.grammar_fast_forward): the overlap
    schedule off (under overlap the next decode step is already launched when a step's tokens are
    processed, so forced tokens could not be appended before it runs) and SGLang's mixed chunk on
    unless ``sglang_args`` says otherwise (a forced span's extend then carries the running decodes
    instead of pausing them for a step)."""
    if not fast_forward:
        return engine
    update: dict = {}
    if not engine.disable_overlap_schedule:
        log.warning(
            "grammar.fast_forward: the overlap schedule is turned off (engine.disable_overlap_schedule: true): "
            "forced tokens are appended between decode steps, which the overlap schedule runs back to back"
        )
        update["disable_overlap_schedule"] = True
    if "enable_mixed_chunk" not in engine.sglang_args:
        log.info("grammar.fast_forward: SGLang's mixed chunk is on: a forced span's extend carries the running decodes")
        update["sglang_args"] = {**engine.sglang_args, "enable_mixed_chunk": True}
    return engine.model_copy(update=update)


def engine_setup(settings: Settings, info: ModelInfo) -> EngineSetup:
    """Check the KV-cache and quantization settings against the model; build the engine's
    options and the scheduler's config (nothing written yet)."""
    calib = check_kv_cache(settings, info)
    engine = settings.engine.model_copy(update={"max_total_tokens": pool_tokens(settings, info, calib)})
    engine = fast_forward_engine(settings.grammar.fast_forward, engine)
    method, policy = quant_setup(settings, info)
    prefix = settings.prefix_cache
    runtime = replace(  # the attention choice has no setting: it stays what the environment says
        RuntimeExtConfig.from_env(),
        kv_calibration=settings.kv_calibration.resolve() if calib is not None else None,
        kv_rotation=settings.kv_rotation,
        quant_policy=policy,
        combine_blocks=prefix.combine_blocks,
        prefix_events=prefix.events_path,
        quant_monitor=monitor_setup(settings, info, method, policy),
        admission=settings.scheduling.admission,
        reserve_ratio=settings.scheduling.reserve_ratio,
        fast_forward=settings.grammar.fast_forward,
    )
    options = EngineOptions(
        model_path=info.path,
        engine=engine,
        dtype=settings.dtype,
        kv_cache=settings.kv_cache,
        quantization=method,
        prefix_cache=prefix.backend,
    )
    return EngineSetup(options, runtime)


def prepare_engine(settings: Settings, info: ModelInfo) -> EngineOptions:
    """``engine_setup``, then the scheduler's config written where its processes read it."""
    setup = engine_setup(settings, info)
    setup.runtime.export()
    return setup.options

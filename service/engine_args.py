"""The ``sglang.Engine`` arguments: what the service sets from its settings, the parallelism
inside one replica, and the user's validated pass-through (``engine.sglang_args``).

``engine.sglang_args`` reaches any ``ServerArgs`` field the service does not model. Each key is
checked against SGLang's own ``ServerArgs`` fields (``sglang.srt.server_args.record_fields``)
and each value against the field's declared type and choices before the engine starts; an
unknown field, a field the service owns (``OWNED``: it names the setting to use instead) or a
wrong value is a startup error naming the field. This module and ``service.engine`` are the
service modules that import sglang (lazily here: only ``checked_sglang_args`` does).
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime_ext.kv_cache.sizing import KVMode
from service.settings import DisaggregationSettings, EngineSettings, PrefixBackend

# ServerArgs fields the service sets itself, with the setting that sets them.
OWNED: dict[str, str] = {
    "model_path": "model",
    "tokenizer_path": "model",
    "served_model_name": "served_model_name",
    "host": "host",
    "port": "port",
    "api_key": "api_keys",
    "admin_api_key": "api_keys",
    "dtype": "dtype",
    "device": "engine.device",
    "max_total_tokens": "engine.max_total_tokens (or engine.kv_cache_bytes)",
    "page_size": "engine.page_size",
    "context_length": "engine.context_length",
    "chunked_prefill_size": "engine.chunked_prefill_size",
    "max_running_requests": "engine.max_running_requests",
    "attention_backend": "engine.attention_backend",
    "random_seed": "engine.random_seed",
    "log_level": "engine.log_level",
    "sleep_on_idle": "engine.sleep_on_idle",
    "disable_overlap_schedule": "engine.disable_overlap_schedule",
    "tp_size": "engine.tp_size",
    "dp_size": "engine.dp_size",
    "base_gpu_id": "engine.devices",
    "gpu_id_step": "engine.devices",
    "kv_cache_dtype": "kv_cache",
    "quantization": "quantization",
    "disable_radix_cache": "prefix_cache.backend",
    "radix_cache_backend": "prefix_cache.backend",
    "tool_call_parser": "tool_format",
    "reasoning_parser": "reasoning.format",
    "chat_template": "the model directory's chat template",
    "skip_tokenizer_init": "(the service tokenizes)",
    "incremental_streaming_output": "(the service streams increments)",
    "constrained_json_disable_any_whitespace": "(the service's JSON grammars)",
    "disaggregation_mode": "engine.disaggregation.mode",
    "disaggregation_transfer_backend": "engine.disaggregation.transfer_backend",
    "disaggregation_bootstrap_port": "engine.disaggregation.bootstrap_port",
}
CPU_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"  # SGLang's per-rank CPU cores on the CPU engine
NPU_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"  # the NPUs a process sees (CANN runtime)
HOST_IP_ENV = "SGLANG_HOST_IP"  # the address SGLang's PD transfer binds and advertises


@dataclass(frozen=True)
class EngineOptions:
    """The engine's arguments: ``engine`` is the ``engine:`` settings section as startup resolved
    it (``max_total_tokens`` from the KV byte budget when one is set), the rest come from the
    top-level settings and the startup checks."""

    model_path: Path
    engine: EngineSettings = field(default_factory=EngineSettings)
    dtype: str = "auto"
    kv_cache: KVMode = "bf16"
    quantization: str | None = None  # an SGLang quantization method name (ours: structserve_<scheme>)
    prefix_cache: PrefixBackend = "sglang"

    def engine_kwargs(self) -> dict[str, Any]:
        e = self.engine
        kwargs: dict[str, Any] = dict(
            model_path=str(self.model_path),
            dtype=self.dtype,
            device=e.device,
            max_total_tokens=e.max_total_tokens,
            page_size=e.page_size,
            max_running_requests=e.max_running_requests,
            attention_backend=e.attention_backend,
            random_seed=e.random_seed,
            log_level=e.log_level,
            sleep_on_idle=e.sleep_on_idle,
            disable_overlap_schedule=e.disable_overlap_schedule,
            tp_size=e.tp_size,
            dp_size=e.dp_size,
            # bf16 = unquantized (the model's dtype); c8_* are runtime_ext's INT8 methods
            kv_cache_dtype="auto" if self.kv_cache == "bf16" else self.kv_cache,
            incremental_streaming_output=True,
            # JSON without free whitespace: no tokens wasted, and the same grammar
            # grammars/compile.py checks ahead of the engine.
            constrained_json_disable_any_whitespace=True,
        )
        if e.context_length is not None:
            kwargs["context_length"] = e.context_length
        if e.chunked_prefill_size is not None:
            kwargs["chunked_prefill_size"] = e.chunked_prefill_size
        if self.quantization is not None:
            kwargs["quantization"] = self.quantization
        if self.prefix_cache == "off":
            kwargs["disable_radix_cache"] = True
        elif self.prefix_cache == "combined":  # C reaches the scheduler in RuntimeExtConfig.combine_blocks
            kwargs["radix_cache_backend"] = "structserve_combined"
        return {**kwargs, **disaggregation_kwargs(e.disaggregation, e.device), **checked_sglang_args(e.sglang_args)}


def disaggregation_kwargs(pd: DisaggregationSettings, device: str) -> dict[str, Any]:
    """SGLang's ``disaggregation_*`` arguments for ``engine.disaggregation`` (none when off).
    A CPU decode keeps a retracted request's KV in plain CPU tensors: SGLang's default there
    (``host_pool``) registers its host pool with ``cudaHostRegister``, which needs a CUDA driver."""
    if pd.mode is None:
        return {}
    kwargs: dict[str, Any] = dict(
        disaggregation_mode=pd.mode,
        disaggregation_transfer_backend=pd.transfer_backend,
        disaggregation_bootstrap_port=pd.bootstrap_port,
    )
    if pd.mode == "decode" and device == "cpu":
        kwargs["disaggregation_decode_retraction_backup"] = "cpu_tensor"
    return kwargs


def checked_sglang_args(args: dict[str, Any]) -> dict[str, Any]:
    """``engine.sglang_args`` checked against SGLang's ``ServerArgs``; raises ValueError naming
    the first bad field (unknown, owned by the service, or a value its type/choices refuse)."""
    if not args:
        return {}
    from pydantic import TypeAdapter, ValidationError
    from sglang.srt.server_args import ServerArgs, record_fields

    fields = {f.name: f for f in record_fields(ServerArgs) if not f.name.startswith("_")}
    checked: dict[str, Any] = {}
    for name, value in args.items():
        if name in OWNED:
            raise ValueError(f"engine.sglang_args.{name}: set by structserve; use {OWNED[name]} instead")
        if name not in fields:
            raise ValueError(f"engine.sglang_args.{name}: not a field of SGLang's ServerArgs (sglang 0.5.23)")
        kind, choices = _declared(fields[name].type)
        try:
            checked[name] = TypeAdapter(kind).validate_python(value)
        except ValidationError as exc:
            raise ValueError(
                f"engine.sglang_args.{name}: {value!r} is not a {kind}: {exc.errors()[0]['msg']}"
            ) from None
        if choices is not None and checked[name] not in choices:
            raise ValueError(f"engine.sglang_args.{name}: {value!r} is not one of {list(choices)}")
    return checked


def _declared(annotation: Any) -> tuple[Any, Any]:
    """A ServerArgs field's type and CLI choices, from ``Annotated[T, help | Arg(...)]``."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return annotation, None
    kind, *meta = typing.get_args(annotation)
    choices = next((m.choices for m in meta if getattr(m, "choices", None)), None)
    return kind, choices


def cpu_thread_binding(cores: list[int], ranks: int) -> str:
    """``SGLANG_CPU_OMP_THREADS_BIND`` for ``ranks`` schedulers on these cores: contiguous,
    equal shares (``0|1`` for 2 ranks on 2 cores). SGLang's CPU engine otherwise wants one NUMA
    node per rank and refuses to start (``numa_utils.init_threads_binding``)."""
    if ranks > len(cores):
        raise ValueError(f"engine.dp_size * engine.tp_size = {ranks} ranks need at least {ranks} CPU cores")
    share, ordered = len(cores) // ranks, sorted(cores)
    return "|".join(_cpu_list(ordered[i * share : (i + 1) * share]) for i in range(ranks))


def _cpu_list(cores: list[int]) -> str:
    """``0-3`` for a contiguous run (the form SGLang's examples use), else ``0,2,5``."""
    if cores[-1] - cores[0] == len(cores) - 1:
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def prepare_process_env(device: str, engine: EngineSettings | None = None) -> None:
    """The environment SGLang's processes read (children inherit it): the CPU engine switch,
    the per-rank CPU cores when there is more than one rank, the NPUs this replica uses."""
    if device == "cpu":
        os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    if engine is None:
        return
    ranks = engine.tp_size * engine.dp_size
    if device == "cpu" and ranks > 1 and CPU_BIND_ENV not in os.environ:
        os.environ[CPU_BIND_ENV] = cpu_thread_binding(list(os.sched_getaffinity(0)), ranks)
    if engine.disaggregation.host_ip is not None:
        os.environ[HOST_IP_ENV] = engine.disaggregation.host_ip
    if engine.devices is not None:
        os.environ[NPU_DEVICES_ENV] = ",".join(str(d) for d in engine.devices)
    if (method := start_method(device, engine.start_method)) != "spawn":  # spawn: SGLang's own choice
        use_start_method(method)


def start_method(device: str, setting: str) -> str:
    """The multiprocessing start method of the engine's processes for ``engine.start_method``."""
    if setting != "auto":
        return setting
    return "fork" if device == "cpu" else "spawn"


def use_start_method(method: str) -> None:
    """SGLang forces ``spawn`` while it configures the process (``_set_envs_and_config``), just
    before it starts its processes; re-set ``method`` right after it."""
    import multiprocessing

    from sglang.srt.entrypoints import engine as sglang_engine

    configure = getattr(sglang_engine._set_envs_and_config, "__wrapped__", sglang_engine._set_envs_and_config)

    def configured(server_args: Any) -> None:
        configure(server_args)
        multiprocessing.set_start_method(method, force=True)

    configured.__wrapped__ = configure  # type: ignore[attr-defined]
    sglang_engine._set_envs_and_config = configured

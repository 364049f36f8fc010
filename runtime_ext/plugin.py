"""Entry point SGLang calls in every process it starts (launcher, scheduler, detokenizer).

``register()`` must be idempotent and cheap: SGLang may call it several times per
process. Each capability registers itself here, with its part of the process's one
``PluginState`` (``runtime_ext.state``), which this module owns. The plugin also reports itself
through the scheduler's internal-state RPC, which is how the service (and the
tests) prove that our code really runs inside SGLang's scheduler process.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from runtime_ext import __version__
from runtime_ext.report import INTERNAL_STATE_KEY, KVServing, SchedulerReport
from runtime_ext.state import PluginState

__all__ = ["INTERNAL_STATE_KEY", "plugin_report", "kv_serving_report", "register"]
_INTERNAL_STATE_TARGET = (
    "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController.get_internal_state"
)
_STATE = PluginState()  # this process's


def plugin_report() -> SchedulerReport:
    """What the plugin says about itself in the process that calls this. In the scheduler the
    report hook adds what serves K/V, read from the live objects (``kv_serving_report``)."""
    state = _STATE
    kernels = _kv_kernel_calls()
    sections = {
        "kv_kernel_calls": kernels["kv_kernel_calls"],
        "kv_cache_stats": state.kv_cache.method_stats(),
        "quant": state.quant.report(),
        "prefix_cache": state.prefix_cache.report(),
        "admission": state.admission.report(),
        "attention": state.attention.report(),
        "grammar": state.grammar.report(),
        "fast_forward": _fast_forward_report(),
        "pd": _pd_report(),
        "decode_kernels": _decode_kernels(),
    }
    return SchedulerReport(
        version=__version__,
        pid=os.getpid(),
        registered=os.getpid() in state.registered_pids,
        kv_cache=state.kv_cache.method_name(),
        kv_rotation=state.kv_cache.rotation(),
        kv_kernels=state.kv_cache.kernels(),
        kv_kernels_reason=kernels["kv_kernels_reason"],
        sections=sections,
    )


def _pd_report() -> dict[str, int]:
    """Prefill/decode link-down counts in this process (non-zero only in a decode scheduler)."""
    from runtime_ext.pd.link_down import STATS

    return STATS.report()


def _fast_forward_report() -> dict[str, Any]:
    """Grammar fast-forward in this process: decode steps, spans appended, their tokens."""
    from runtime_ext.grammar_fast_forward import STATS

    return STATS.report()


def _decode_kernels() -> dict[str, Any]:
    """What runs decode's bf16 linear layers, attention, RMSNorm/RoPE and seeded sampling on the CPU, why,
    the calls of each."""
    from runtime_ext.ops import attention_cpu, linear_cpu, norm_cpu, sample_cpu

    return {
        "linear": linear_cpu.report(),
        "attention": attention_cpu.report(),
        "norm_rope": norm_cpu.report(),
        "sampling": sample_cpu.report(),
    }


def _kv_kernel_calls() -> dict[str, Any]:
    """Why the C8 KV calls on the CPU run where they do, and the calls each implementation ran here."""
    from runtime_ext.ops import kv_cpu  # (torch: the scheduler has it loaded)

    return kv_cpu.report()


def pool_report(scheduler: Any) -> dict[str, int]:
    """The KV pool as allocated: tokens and bytes (SGLang's buffers plus our side buffers)."""
    allocator = scheduler.token_to_kv_pool_allocator
    pool = allocator.get_kvcache()
    method = getattr(pool, "quant_method", None)
    side = method.side_bytes() if hasattr(method, "side_bytes") else 0
    report = {
        "tokens": int(scheduler.max_total_num_tokens),
        "page_size": int(allocator.page_size),
        "bytes": int(sum(pool.get_kv_size_bytes())) + side,
    }
    if hasattr(method, "slots_on"):  # leak census: residual slots still held by free pages
        import torch

        pages, size = allocator.get_all_free_pages(), allocator.page_size
        locs = (pages.reshape(-1, 1) * size + torch.arange(size, device=pages.device)).flatten()
        report["residual_slots_on_free_pages"] = method.slots_on(locs)
    return report


def kv_serving_report(scheduler: Any) -> KVServing:
    """What serves K/V in this scheduler, read from its live objects (not from settings or hook state):
    the pool's class, what its buffers store, the quant method it holds, the attention backend's class."""
    pool = scheduler.token_to_kv_pool_allocator.get_kvcache()
    method = pool.get_kv_cache_quant_method() if hasattr(pool, "get_kv_cache_quant_method") else None
    store = getattr(pool, "store_dtype", None) or pool.dtype
    return KVServing(
        pool_class=type(pool).__name__,
        store_dtype=str(store).removeprefix("torch."),
        quant_method=getattr(method, "name", "unquantized"),
        attention_backend=_backend_name(scheduler.tp_worker.model_runner.attn_backend),
    )


def _backend_name(backend: Any) -> str:
    """The attention backend's class; a hybrid one names its prefill and decode backends."""
    parts = [getattr(backend, f"{phase}_backend", None) for phase in ("prefill", "decode")]
    if all(part is not None for part in parts):
        return f"{type(backend).__name__}(prefill={type(parts[0]).__name__}, decode={type(parts[1]).__name__})"
    return type(backend).__name__


def _add_report(result: Any, controller: Any = None, *_args: Any, **_kwargs: Any) -> Any:
    """AFTER hook: append our report (``to_wire``) to the scheduler's internal state."""
    state = getattr(result, "internal_state", None)
    if isinstance(state, dict):
        report = plugin_report()
        scheduler = getattr(controller, "scheduler", None)
        if scheduler is not None:
            try:  # a report must never take the scheduler down
                report = _with_scheduler(report, scheduler)
            except Exception as exc:  # noqa: BLE001
                report = replace(report, error=f"{type(exc).__name__}: {exc}")
        state[INTERNAL_STATE_KEY] = report.to_wire()
    return result


def _with_scheduler(report: SchedulerReport, scheduler: Any) -> SchedulerReport:
    """``report`` with what the scheduler's live objects say: its pool, census, admission, rank and
    what serves K/V (``kv_cache`` becomes the pool's method, not the configured name)."""
    from runtime_ext.admission.sglang_adder import admission_report
    from runtime_ext.census import census

    sections = {
        **report.sections,
        "kv_pool": pool_report(scheduler),
        "kv_census": census(scheduler),
        "admission": admission_report(scheduler, _STATE.admission),
    }
    serving = kv_serving_report(scheduler)
    return replace(report, sections=sections, dp_rank=_dp_rank(), serving=serving, kv_cache=serving.quant_method)


def _dp_rank() -> int:
    """This scheduler's data-parallel rank (0 without data parallelism)."""
    from sglang.srt.runtime_context import get_parallel

    return int(get_parallel().dp_rank or 0)


def register() -> None:
    """Register structserve's hooks with SGLang (idempotent per process)."""
    state = _STATE
    if os.getpid() in state.registered_pids:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from runtime_ext import decode_hooks, grammar_cache, grammar_fast_forward, grammar_route
    from runtime_ext.admission import sglang_adder as admission
    from runtime_ext.attention import native
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.fixes import grammar_token_sync, min_p_seed, sampling_seed
    from runtime_ext.kv_cache import sglang_hooks as kv_hooks
    from runtime_ext.parsers.sglang_adapter import register_tool_parsers
    from runtime_ext.pd import cpu_transfer, link_down
    from runtime_ext.prefix_cache import sglang_backend as prefix_backend
    from runtime_ext.quant import checkpoint_method
    from runtime_ext.quant import sglang_methods as quant_methods

    config = RuntimeExtConfig.from_env()  # the one read of the service's config in this process
    HookRegistry.register(_INTERNAL_STATE_TARGET, _add_report, HookType.AFTER)
    sampling_seed.register(HookRegistry, HookType)
    min_p_seed.register(HookRegistry, HookType)  # min_p with the seeds above (else an assertion)
    grammar_token_sync.register(HookRegistry, HookType)  # no all-reduce of grammar tokens on one rank
    grammar_route.register(HookRegistry, HookType, state.grammar)  # %llguidance grammars to llguidance
    grammar_cache.register(HookRegistry, HookType)  # SGLang's and xgrammar's grammar caches bounded
    grammar_fast_forward.register(HookRegistry, HookType, config.fast_forward)  # forced tokens: no decode step
    kv_hooks.register(HookRegistry, HookType, state.kv_cache)  # kv_cache_dtype="c8_dynamic"
    decode_hooks.register(HookRegistry, HookType)  # bf16 linears (1-64 rows), lm_head, norms, seeded draws: compiled
    native.register(state.attention, HookRegistry, HookType)  # torch_native: new queries only, batched decode
    quant_methods.register(HookRegistry, HookType, state.quant, config)  # quantization="structserve_w8a8_dynamic"..
    checkpoint_method.register(state.quant, config)  # msModelSlim-layout checkpoints (quant_model_description.json)
    prefix_backend.register(state.prefix_cache)  # radix_cache_backend="structserve_combined"
    cpu_transfer.register(HookRegistry, HookType)  # PD prefill's KV send without CUDA events on the CPU
    link_down.register(HookRegistry, HookType)  # PD decode: a refused prefill fails its requests and frees their KV now
    register_tool_parsers()  # structserve_<format> names for SGLang's own --tool-call-parser
    admission.register(HookRegistry, HookType, state.admission, config.admission, config.reserve_ratio)
    state.registered_pids.add(os.getpid())
    # A process forked from here (engine.start_method: fork) inherits the hooks, and SGLang's
    # load_plugins() there returns at once (its loaded flag is inherited too).
    os.register_at_fork(after_in_child=lambda: state.registered_pids.add(os.getpid()))

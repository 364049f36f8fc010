"""GET /metrics in the Prometheus text format. Engine gauges are read at scrape time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtime_ext.report import SchedulerReport
from runtime_ext.report_merge import merged
from service import metrics as m
from service.api.deps import ServiceState, get_state

router = APIRouter()


@router.get("/metrics")
async def metrics(state: Annotated[ServiceState, Depends(get_state)]) -> Response:
    m.READY.set(1 if state.ready else 0)
    if state.admission is not None:
        m.ACTIVE.set(state.admission.running)
        m.QUEUED.set(state.admission.queued)
    if state.engine is not None and state.failure is None:
        usage = await state.engine.kv_usage()
        m.KV_USED.set(usage.used_tokens)
        m.KV_CAPACITY.set(usage.capacity_tokens)
        reports = [r for r in await state.engine.plugin_reports() if r.registered]
        for report in reports:
            m.PLUGIN.labels(scheduler_pid=str(report.pid), dp_rank=str(report.dp_rank), version=report.version).set(1)
        replica = merged(reports)
        if replica is not None:
            _plugin_gauges(replica)
    return Response(generate_latest(m.REGISTRY), media_type=CONTENT_TYPE_LATEST)


def _plugin_gauges(report: SchedulerReport) -> None:
    """Gauges from runtime_ext's report (read in the scheduler processes, merged over dp ranks)."""
    m.KV_METHOD.labels(method=report.kv_cache).set(1)
    if report.serving is not None:
        m.KV_SERVING.labels(
            pool_class=report.serving.pool_class,
            store_dtype=report.serving.store_dtype,
            attention_backend=report.serving.attention_backend,
        ).set(1)
    m.KV_ROTATION.labels(rotation=report.kv_rotation).set(1)
    m.KV_KERNELS.labels(impl=report.kv_kernels).set(1)
    if report.kv_kernels_reason:
        m.KV_KERNELS_REASON.labels(reason=report.kv_kernels_reason).set(1)
    for impl, calls in report.section("kv_kernel_calls").items():
        m.KV_KERNEL_CALLS.labels(impl=impl).set(calls)
    for kernel, entry in report.section("decode_kernels").items():
        m.DECODE_KERNELS.labels(kernel=kernel, impl=str(entry.get("impl")), reason=str(entry.get("reason"))).set(1)
        for impl, calls in entry.get("calls", {}).items():
            m.DECODE_KERNEL_CALLS.labels(kernel=kernel, impl=impl).set(calls)
    _kv_pool(report)
    attention = report.section("attention")
    for path in ("batched", "per_request"):
        m.ATTENTION.labels(impl=attention.get("impl", "unknown"), path=path).set(
            attention.get(f"{path}_decode_calls", 0)
        )
    grammar, quant = report.section("grammar"), report.section("quant")
    for library, count in grammar.get("compiles", {}).items():
        m.ENGINE_GRAMMARS.labels(library=library).set(count)
    m.GRAMMAR_FALLBACKS.scheduler = dict(grammar.get("fallbacks", {}))
    for state in ("quantized", "kept"):
        m.QUANT_LAYERS.labels(state=state).set(quant.get(state, 0))
    for path in ("int8", "copy", "standby", "standby_rows"):
        m.QUANT_MATMULS.labels(path=path).set(quant.get(f"{path}_calls", 0))
    _quant_monitor(quant.get("monitor"))
    _admission(report.section("admission"))
    for stat, value in report.section("pd").items():
        m.PD_LINK.labels(stat=stat).set(value)
    prefix = report.section("prefix_cache")
    if prefix.get("backend"):
        for stat in ("hit_tokens", "miss_tokens", "abandoned_pages", "evicted_tokens", "draft_dropped_pages"):
            m.PREFIX_CACHE.labels(stat=stat).set(prefix[stat])


def _quant_monitor(monitor: dict | None) -> None:
    if not monitor:
        return
    for stat in (
        "fallbacks",
        "request_fallbacks",
        "reloads",
        "reload_errors",
        "to_int8",
        "standby",
        "steps",
        "windows_closed",
    ):
        m.QUANT_MONITOR.labels(stat=stat).set(monitor.get(stat, 0))
    for layer, state in monitor.get("layers", {}).items():
        m.QUANT_LAYER_RATE.labels(layer=layer).set(state["rate"])
        m.QUANT_LAYER_FALLBACK.labels(layer=layer).set(1 if state["state"] == "fallback" else 0)


def _kv_pool(report: SchedulerReport) -> None:
    pool = report.section("kv_pool")
    if pool:
        m.KV_POOL_BYTES.set(pool["bytes"])
        if "residual_slots_on_free_pages" in pool:  # a leak census: must stay 0
            m.KV_RESIDUAL.labels(stat="slots_on_free_pages").set(pool["residual_slots_on_free_pages"])
    for part, value in report.section("kv_census").items():
        m.KV_CENSUS.labels(part=part).set(value)
    stats = report.section("kv_cache_stats")
    for stat in ("outlier_rate", "slots_used", "slots", "dropped"):
        if stat in stats:
            m.KV_RESIDUAL.labels(stat=stat).set(stats[stat])
    if "requests_failed_non_finite" in stats:
        m.KV_REFUSED.labels(what="requests").set(stats["requests_failed_non_finite"])
        m.KV_REFUSED.labels(what="tokens").set(stats["tokens_refused"])


def _admission(admission: dict | None) -> None:
    if not admission:
        return
    m.ADMISSION_POLICY.labels(policy=admission["policy"]).set(1)
    for stat in (
        "retractions",
        "retracted_requests",
        "retracted_tokens",
        "recomputed_tokens",
        "budget_holds",
        "reused_tokens",
        "admitted",
    ):
        m.SCHEDULER.labels(stat=stat).set(admission[stat])
    if "waiting_requests" in admission:  # read in the scheduler with its census
        m.SCHEDULER.labels(stat="waiting_requests").set(admission["waiting_requests"])
        for state in ("reserved", "used", "outstanding"):
            m.KV_PAGES.labels(state=state).set(admission[f"{state}_pages"])
        m.KV_PAGES.labels(state="pool").set(admission["pool_pages"])
    m.SCHEDULER_QUEUE.report = admission

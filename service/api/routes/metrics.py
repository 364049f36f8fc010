"""GET /metrics in the Prometheus text format. Engine gauges are read at scrape time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from service.api.deps import ServiceState, get_state

REGISTRY = CollectorRegistry()
REQUESTS = Counter("structserve_requests", "HTTP requests by route and status", ["route", "status"], registry=REGISTRY)
KV_USED = Gauge("structserve_kv_used_tokens", "KV pool tokens held by running requests", registry=REGISTRY)
KV_CAPACITY = Gauge("structserve_kv_capacity_tokens", "KV pool size in tokens", registry=REGISTRY)
READY = Gauge("structserve_ready", "1 when the engine serves requests", registry=REGISTRY)
PLUGIN = Gauge(
    "structserve_runtime_ext_loaded",
    "1 when the runtime_ext plugin reports itself from inside SGLang's scheduler process",
    ["scheduler_pid", "version"],
    registry=REGISTRY,
)

router = APIRouter()


@router.get("/metrics")
async def metrics(state: Annotated[ServiceState, Depends(get_state)]) -> Response:
    READY.set(1 if state.ready else 0)
    if state.engine is not None and state.failure is None:
        usage = await state.engine.kv_usage()
        KV_USED.set(usage.used_tokens)
        KV_CAPACITY.set(usage.capacity_tokens)
        report = await state.engine.plugin_report()
        if report and report.get("registered"):
            PLUGIN.labels(scheduler_pid=str(report["pid"]), version=report["version"]).set(1)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

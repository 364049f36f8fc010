"""GET /health (the process is alive) and GET /ready (the engine can take requests)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from service.api.deps import ServiceState, get_state
from service.api.errors import error_body

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(state: Annotated[ServiceState, Depends(get_state)]) -> JSONResponse:
    reason = state.not_ready_reason()
    if reason is None:
        return JSONResponse({"status": "ready", "model": state.served_model_name})
    return JSONResponse(status_code=503, content=error_body(reason, "service_unavailable", None, "not_ready"))

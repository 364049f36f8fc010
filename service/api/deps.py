"""Process-wide service state and the FastAPI dependencies that read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from service.errors import NotReadyError
from service.pipeline.chat import ChatPipeline
from service.settings import Settings


@dataclass
class ServiceState:
    settings: Settings
    served_model_name: str
    engine: Any = None  # service.engine.SGLangEngine once loaded
    grammar: Any = None  # service.grammar.GrammarService once loaded
    pipeline: ChatPipeline | None = None
    context_length: int | None = None
    draining: bool = False
    failure: str | None = None
    created: int = 0
    admission: Any = None  # service.limits.Admission (chat requests running / queued)
    counters: dict[str, int] = field(default_factory=lambda: {"inflight": 0})  # /v1/ requests being served
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.pipeline is not None and not self.draining and self.failure is None


def get_state(request: Request) -> ServiceState:
    return request.app.state.service


def ready_pipeline(request: Request) -> ChatPipeline:
    state = get_state(request)
    if state.failure is not None:
        raise NotReadyError(f"the engine failed to start: {state.failure}")
    if state.draining:
        raise NotReadyError("the server is shutting down; retry on another replica")
    if state.pipeline is None:
        raise NotReadyError("the model is still loading; retry when GET /ready returns 200")
    return state.pipeline

"""Process-wide service state and the FastAPI dependencies that read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request

from service.errors import NotReadyError
from service.pipeline.chat import ChatPipeline
from service.settings import Settings

if TYPE_CHECKING:  # typing only: main.py builds these once the engine is loaded
    from service.engine import SGLangEngine
    from service.grammar_check import GrammarService
    from service.limits import Admission


@dataclass
class ServiceState:
    settings: Settings
    served_model_name: str
    engine: SGLangEngine | None = None  # once loaded
    grammar: GrammarService | None = None  # once loaded
    pipeline: ChatPipeline | None = None
    context_length: int | None = None
    draining: bool = False
    failure: str | None = None  # the engine failed to start
    engine_death: str | None = None  # an engine process died while serving (the server exits)
    created: int = 0
    admission: Admission | None = None  # chat requests running / queued (set by the app factory)
    counters: dict[str, int] = field(default_factory=lambda: {"inflight": 0})  # /v1/ requests being served
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.not_ready_reason() is None

    def not_ready_reason(self) -> str | None:
        """Why new requests cannot be served now (None: they can). /ready and the gate (before
        queueing) refuse with this reason."""
        if self.draining and self.failure is None and self.engine_death is None:
            return "the server is shutting down; retry on another replica"
        return self.cannot_serve_reason()

    def cannot_serve_reason(self) -> str | None:
        """Why a request the gate already let in cannot be served (None: it can). A drain does
        not stop it: requests queued before SIGTERM are served before exit."""
        if self.engine_death is not None:
            return f"the engine stopped ({self.engine_death}); this server is exiting: retry on another replica"
        if self.failure is not None:
            return f"the engine failed to start: {self.failure}"
        if self.pipeline is None:
            return "the model is still loading; retry when GET /ready returns 200"
        return None


def get_state(request: Request) -> ServiceState:
    return request.app.state.service


def ready_pipeline(request: Request) -> ChatPipeline:
    state = get_state(request)
    if (reason := state.cannot_serve_reason()) is not None:
        raise NotReadyError(reason)
    return state.pipeline

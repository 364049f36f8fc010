"""POST /v1/responses, GET and DELETE /v1/responses/{id}: the chat pipeline behind OpenAI's
Responses API.

Thin: ``service/fronts/responses`` converts the request to a chat request (and error params
back), ``ChatPipeline`` runs it, the builder / event stream convert the result. ``store: true``
keeps the response in the configured store (``service/responses_store.py``) under the owner of
the request's API key (``request.state``, set by the gate); every lookup is under the caller's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from service.api.deps import get_state, ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.gate import OWNER
from service.api.sse import event_stream, typed_events
from service.errors import ServiceError
from service.fronts.base import FrontEvents, front_params
from service.fronts.responses import ResponseBuilder, ResponseEventStream, to_chat_request
from service.fronts.responses.keep import Keeper, conversation
from service.pipeline.chat import ChatPipeline, PreparedChat
from service.protocol.responses import InputItem, ResponsesRequest
from service.protocol.responses_output import Response, ResponseStreamEvent
from service.responses_store import MemoryResponseStore, ResponseStore
from service.responses_store_redis import RedisResponseStore
from service.settings import ResponsesSettings

router = APIRouter()
log = logging.getLogger(__name__)
STORE = "responses"  # ServiceState.extra key of the ResponseStore (service/main.py opens it)


def open_store(settings: ResponsesSettings) -> ResponseStore:
    """The store ``responses.store`` names (a Redis client connects at its first command)."""
    if settings.store == "memory":
        return MemoryResponseStore(settings.ttl_s, settings.max_entry_bytes, settings.max_total_bytes)
    if not settings.redis_url:  # ResponsesSettings validation refuses this; one built around it stops here
        raise ValueError("responses.store: redis needs responses.redis_url (redis://host:port/db)")
    return RedisResponseStore(settings.redis_url, settings.ttl_s, settings.max_entry_bytes, settings.redis_timeout_s)


def _store(request: Request) -> ResponseStore:
    return get_state(request).extra[STORE]  # type: ignore[no-any-return]


def _owner(request: Request) -> str:
    """The caller's API-key owner id; the gate sets it on every /v1/ request (none: fail closed)."""
    return getattr(request.state, OWNER)  # type: ignore[no-any-return]


@router.post("/v1/responses", response_model=Response)
async def create_response(
    body: ResponsesRequest,
    request: Request,
    pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)],
) -> Any:
    store, owner = _store(request), _owner(request)
    history: tuple[InputItem, ...] = ()
    if body.previous_response_id is not None:
        previous = await store.get(
            owner, body.previous_response_id, "previous_response_id", "previous_response_not_found"
        )
        history = previous.conversation
    elif body.store:
        await store.check()  # an unreachable store is a 503 before any work
    chat_request, params = to_chat_request(body, history)
    with front_params(params):
        prepared = await pipeline.prepare(chat_request)
    builder = ResponseBuilder(body)
    keep = Keeper(store, owner, conversation(body, history)) if body.store else None
    if body.stream:
        stream = ResponseEventStream(builder)
        events = FrontEvents(stream, params, _error_event(stream), keep.final if keep is not None else None)
        return event_stream(typed_events(events.run(pipeline.stream(prepared))))
    return await answer_unless_disconnected(request, _complete(pipeline, prepared, builder, keep))


async def _complete(
    pipeline: ChatPipeline, prepared: PreparedChat, builder: ResponseBuilder, keep: Keeper | None
) -> Response:
    response = builder.from_completion(await pipeline.complete(prepared))
    if keep is not None:
        await keep(response)
    return response


@router.get("/v1/responses/{response_id}", response_model=Response)
async def get_response(response_id: str, request: Request) -> Response:
    stored = await _store(request).get(_owner(request), response_id, None, "response_not_found")
    return stored.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    await _store(request).delete(_owner(request), response_id)
    return {"id": response_id, "object": "response", "deleted": True}


def _error_event(stream: ResponseEventStream) -> Callable[[ServiceError], list[ResponseStreamEvent]]:
    return lambda exc: stream.error(exc.message, exc.code, exc.param)

"""POST /v1/responses and GET /v1/responses/{id}: the chat pipeline behind OpenAI's Responses API.

Thin: ``service/pipeline/responses`` converts the request to a chat request (and error params
back), ``ChatPipeline`` runs it, the builder / event stream convert the result. ``store: true``
keeps the response in this replica's bounded memory (``service/responses_store.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from grammars.errors import GrammarError
from service.api.deps import get_state, ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.sse import event_stream, frame
from service.errors import ServiceError
from service.pipeline.chat import ChatPipeline, PreparedChat
from service.pipeline.responses import ParamMap, ResponseBuilder, ResponseEventStream, to_chat_request
from service.protocol.responses import InputItem, MessageItem, ResponsesRequest
from service.protocol.responses_output import Response
from service.responses_store import ResponseStore

router = APIRouter()


def _store(request: Request) -> ResponseStore:
    state = get_state(request)
    return state.extra.setdefault("responses", ResponseStore())  # type: ignore[no-any-return]


def _inputs(body: ResponsesRequest) -> tuple[InputItem, ...]:
    return (MessageItem(role="user", content=body.input),) if isinstance(body.input, str) else tuple(body.input)


@router.post("/v1/responses", response_model=Response)
async def create_response(
    body: ResponsesRequest,
    request: Request,
    pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)],
) -> Any:
    store = _store(request)
    history: tuple[InputItem, ...] = ()
    if body.previous_response_id is not None:
        history = store.get(
            body.previous_response_id, "previous_response_id", "previous_response_not_found"
        ).conversation
    chat_request, params = to_chat_request(body, history)
    try:
        prepared = await pipeline.prepare(chat_request)
    except (ServiceError, GrammarError) as exc:
        exc.param = params.to_responses(exc.param)
        raise
    builder, inputs = ResponseBuilder(body), history + _inputs(body)
    if body.stream:
        return event_stream(_sse(_events(pipeline, prepared, builder, params, store if body.store else None, inputs)))
    return await answer_unless_disconnected(
        request, _complete(pipeline, prepared, builder, store if body.store else None, inputs)
    )


async def _complete(
    pipeline: ChatPipeline,
    prepared: PreparedChat,
    builder: ResponseBuilder,
    store: ResponseStore | None,
    inputs: tuple[InputItem, ...],
) -> Response:
    response = builder.from_completion(await pipeline.complete(prepared))
    if store is not None:
        store.put(response, inputs)
    return response


@router.get("/v1/responses/{response_id}", response_model=Response)
async def get_response(response_id: str, request: Request) -> Response:
    return _store(request).get(response_id, None, "response_not_found").response


async def _events(
    pipeline: ChatPipeline,
    prepared: PreparedChat,
    builder: ResponseBuilder,
    params: ParamMap,
    store: ResponseStore | None,
    inputs: tuple[InputItem, ...],
) -> AsyncIterator[BaseModel]:
    """The Responses events of one streamed request; a failure after the start is an ``error`` event."""
    events = ResponseEventStream(builder)
    for event in events.start():
        yield event
    chunks = pipeline.stream(prepared)
    try:
        async for chunk in chunks:
            for event in events.feed(chunk):
                yield event
    except ServiceError as exc:
        for event in events.error(exc.message, exc.code, params.to_responses(exc.param)):
            yield event
        return
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    final = events.finish()
    last = final[-1]
    if store is not None and isinstance(getattr(last, "response", None), Response):
        store.put(last.response, inputs)  # type: ignore[attr-defined]
    for event in final:
        yield event


async def _sse(events: AsyncIterator[BaseModel]) -> AsyncIterator[bytes]:
    """Responses SSE: each event as ``event: <type>`` + ``data: <json>`` (no ``[DONE]``, as OpenAI)."""
    try:
        async for event in events:
            payload = event.model_dump()
            yield f"event: {payload['type']}\n".encode() + frame(payload)
    finally:
        await events.aclose()  # type: ignore[attr-defined]

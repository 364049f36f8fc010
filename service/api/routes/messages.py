"""POST /v1/messages and /v1/messages/count_tokens: the chat pipeline behind Anthropic's
Messages API.

Thin, as ``routes/responses.py``: ``service/pipeline/messages`` converts the request to a chat
request (and error params back), ``ChatPipeline`` runs it, ``from_completion`` /
``MessageEventStream`` convert the result. Errors leave in Anthropic's envelope
(``service/api/errors.py`` chooses it by route); a failure after the stream began is an
``error`` event.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request

from grammars.errors import GrammarError
from service.api.deps import ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.errors import anthropic_body, client_error_body
from service.api.sse import event_stream
from service.errors import ServiceError
from service.pipeline.chat import ChatPipeline, PreparedChat
from service.pipeline.messages import (
    MessageEventStream,
    MessagesParamMap,
    from_completion,
    new_message_id,
    to_chat_request,
)
from service.protocol.anthropic import CountTokensRequest, CountTokensResponse, Message, MessagesRequest

router = APIRouter()
log = logging.getLogger(__name__)


@router.post("/v1/messages", response_model=Message)
async def create_message(
    body: MessagesRequest,
    request: Request,
    pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)],
) -> Any:
    chat_request, params = to_chat_request(body)
    try:
        prepared = await pipeline.prepare(chat_request)
    except (ServiceError, GrammarError) as exc:
        exc.param = params.to_messages(exc.param)
        raise
    message_id = new_message_id()
    if body.stream:
        return event_stream(_sse(_events(pipeline, prepared, message_id, body.model, params)))
    return await answer_unless_disconnected(request, _complete(pipeline, prepared, message_id))


async def _complete(pipeline: ChatPipeline, prepared: PreparedChat, message_id: str) -> Message:
    return from_completion(await pipeline.complete(prepared), message_id)


@router.post("/v1/messages/count_tokens", response_model=CountTokensResponse)
async def count_tokens(
    body: CountTokensRequest, pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)]
) -> CountTokensResponse:
    chat_request, params = to_chat_request(body)
    try:
        return CountTokensResponse(input_tokens=len(pipeline.prompt_ids(chat_request)))
    except (ServiceError, GrammarError) as exc:
        exc.param = params.to_messages(exc.param)
        raise


async def _events(
    pipeline: ChatPipeline, prepared: PreparedChat, message_id: str, model: str, params: MessagesParamMap
) -> AsyncIterator[dict[str, Any]]:
    """The Anthropic events of one streamed request; a failure after the start is an ``error`` event."""
    events = MessageEventStream(message_id, model)
    for event in events.start():
        yield event
    chunks = pipeline.stream(prepared)
    try:
        async for chunk in chunks:
            for event in events.feed(chunk):
                yield event
    except ServiceError as exc:
        log.warning("stream failed: %s", exc.message)
        exc.param = params.to_messages(exc.param)
        yield anthropic_body(exc.status, client_error_body(exc))
        return
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    for event in events.finish():
        yield event


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Anthropic SSE: each event as ``event: <type>`` + ``data: <json>`` (no ``[DONE]``)."""
    try:
        async for event in events:
            yield b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
    finally:
        await events.aclose()  # type: ignore[attr-defined]

"""POST /v1/messages and /v1/messages/count_tokens: the chat pipeline behind Anthropic's
Messages API.

Thin, as every front door: the Messages front converts the request to a chat request (and error
params back), ``ChatPipeline`` runs it, ``from_completion`` / ``MessageEventStream`` build the
result. Errors leave in Anthropic's envelope (``service/api/errors.py`` chooses it by route); a
failure after the stream began is an ``error`` event.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from service.api.deps import ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.errors import anthropic_body, client_error_body
from service.api.sse import event_stream, typed_events
from service.errors import ServiceError
from service.fronts.base import FrontEvents, front_params
from service.fronts.messages import MessageEventStream, from_completion, new_message_id, to_chat_request
from service.pipeline.chat import ChatPipeline, PreparedChat
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
    with front_params(params):
        prepared = await pipeline.prepare(chat_request)
    message_id = new_message_id()
    if body.stream:
        events = FrontEvents(MessageEventStream(message_id, body.model), params, _error_event)
        return event_stream(typed_events(events.run(pipeline.stream(prepared))))
    return await answer_unless_disconnected(request, _complete(pipeline, prepared, message_id))


async def _complete(pipeline: ChatPipeline, prepared: PreparedChat, message_id: str) -> Message:
    return from_completion(await pipeline.complete(prepared), message_id)


@router.post("/v1/messages/count_tokens", response_model=CountTokensResponse)
async def count_tokens(
    body: CountTokensRequest, pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)]
) -> CountTokensResponse:
    chat_request, params = to_chat_request(body)
    with front_params(params):
        return CountTokensResponse(input_tokens=len(pipeline.prompt_ids(chat_request)))


def _error_event(exc: ServiceError) -> list[dict[str, Any]]:
    log.warning("stream failed: %s", exc.message)
    return [anthropic_body(exc.status, client_error_body(exc))]

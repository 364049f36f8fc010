"""POST /v1/chat/completions (thin: all logic lives in the pipeline)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from service.api.deps import ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.sse import event_stream, sse
from service.pipeline.chat import ChatPipeline
from service.protocol.openai import ChatCompletion, ChatCompletionRequest

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletion)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)],
):
    prepared = await pipeline.prepare(body)
    if prepared.request.stream:
        return event_stream(sse(pipeline.stream(prepared)))
    return await answer_unless_disconnected(request, pipeline.complete(prepared))

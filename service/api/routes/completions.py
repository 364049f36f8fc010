"""POST /v1/completions (thin: all logic lives in the pipeline)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from service.api.deps import ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.sse import event_stream, sse
from service.pipeline.chat import ChatPipeline
from service.pipeline.completion import CompletionPipeline
from service.protocol.completions import Completion, CompletionRequest

router = APIRouter()


@router.post("/v1/completions", response_model=Completion)
async def completions(
    body: CompletionRequest,
    request: Request,
    chat: Annotated[ChatPipeline, Depends(ready_pipeline)],
):
    pipeline = CompletionPipeline(chat)
    prepared = await pipeline.prepare(body)
    if body.stream:
        return event_stream(sse(pipeline.stream(prepared)))
    return await answer_unless_disconnected(request, pipeline.complete(prepared))

"""POST /v1/chat/completions (thin: all logic lives in the pipeline)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from service.api.deps import ready_pipeline
from service.api.disconnect import ClientDisconnected, unless_disconnected
from service.api.sse import sse
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
        return StreamingResponse(
            sse(pipeline.stream(prepared)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        return await unless_disconnected(request, pipeline.complete(prepared))
    except ClientDisconnected:
        return Response(status_code=499)  # nobody reads it; for logs and metrics only

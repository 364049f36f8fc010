"""POST /v1/chat/completions (thin: all logic lives in the pipeline)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from service.api.deps import ready_pipeline
from service.api.sse import sse
from service.pipeline.chat import ChatPipeline
from service.protocol.openai import ChatCompletion, ChatCompletionRequest

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletion)
async def chat_completions(
    body: ChatCompletionRequest, pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)]
):
    prepared = pipeline.prepare(body)
    if prepared.request.stream:
        return StreamingResponse(
            sse(pipeline.stream(prepared)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return await pipeline.complete(prepared)

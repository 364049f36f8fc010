"""POST /v1/completions (thin: the completions front converts, the chat pipeline runs)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from service.api.deps import ready_pipeline
from service.api.disconnect import answer_unless_disconnected
from service.api.sse import event_stream, sse
from service.fronts.completions import complete, convert_request, stream
from service.pipeline.chat import ChatPipeline
from service.protocol.completions import Completion, CompletionRequest

router = APIRouter()


@router.post("/v1/completions", response_model=Completion)
async def completions(
    body: CompletionRequest,
    request: Request,
    pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)],
):
    prepared = await convert_request(body, pipeline)
    if body.stream:
        return event_stream(sse(stream(pipeline, prepared)))
    return await answer_unless_disconnected(request, complete(pipeline, prepared))

"""POST /tokenize and /detokenize (vLLM's paths; also under /v1/, as SGLang serves them): thin,
the conversion is ``service/fronts/tokenize.py``. Nothing is generated: no admission slot."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from service.api.deps import ready_pipeline
from service.fronts.tokenize import detokenize, tokenize
from service.pipeline.chat import ChatPipeline
from service.protocol.tokenize import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse

router = APIRouter()
TOKENIZE_PATHS = ("/tokenize", "/v1/tokenize")
DETOKENIZE_PATHS = ("/detokenize", "/v1/detokenize")


async def tokenize_route(
    body: TokenizeRequest, pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)]
) -> TokenizeResponse:
    return tokenize(body, pipeline)


async def detokenize_route(
    body: DetokenizeRequest, pipeline: Annotated[ChatPipeline, Depends(ready_pipeline)]
) -> DetokenizeResponse:
    return detokenize(body, pipeline.template, pipeline.limits)


for path in TOKENIZE_PATHS:
    router.add_api_route(
        path, tokenize_route, methods=["POST"], response_model=TokenizeResponse, response_model_exclude_none=True
    )
for path in DETOKENIZE_PATHS:
    router.add_api_route(path, detokenize_route, methods=["POST"], response_model=DetokenizeResponse)

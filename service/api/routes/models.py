"""GET /v1/models and /v1/models/{id}."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from service.api.deps import ServiceState, get_state
from service.errors import ModelNotFoundError
from service.protocol.openai import ModelCard, ModelList

router = APIRouter()


def _card(state: ServiceState) -> ModelCard:
    return ModelCard(id=state.served_model_name, created=state.created, max_model_len=state.context_length)


@router.get("/v1/models", response_model=ModelList)
async def list_models(state: Annotated[ServiceState, Depends(get_state)]) -> ModelList:
    return ModelList(data=[_card(state)])


@router.get("/v1/models/{model_id:path}", response_model=ModelCard)
async def get_model(model_id: str, state: Annotated[ServiceState, Depends(get_state)]) -> ModelCard:
    if model_id != state.served_model_name:
        raise ModelNotFoundError(
            f"model '{model_id}' is not served here; use '{state.served_model_name}'", param="model"
        )
    return _card(state)

"""Prompt stage: messages -> prompt token ids through the model's chat template."""

from __future__ import annotations

from service.errors import InvalidRequestError
from service.pipeline.types import ChatTemplate, PromptIds, ValidatedRequest


def build_prompt(req: ValidatedRequest, template: ChatTemplate) -> PromptIds:
    """Render the conversation with a generation prompt appended."""
    ids = template.render(req.messages)
    if not ids:
        raise InvalidRequestError("the rendered prompt is empty", param="messages")
    return PromptIds(tuple(ids))

"""The model's chat template over its Hugging Face tokenizer (implements ChatTemplate)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from service.errors import InvalidRequestError
from service.pipeline.types import Message


class HFChatTemplate:
    """Renders messages with the tokenizer's own Jinja chat template."""

    def __init__(self, model_dir: Path):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer in {model_dir} has no chat template")

    def render(self, messages: Sequence[Message]) -> list[int]:
        from jinja2 import TemplateError

        conversation = [_as_dict(m) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True
            )
        except TemplateError as exc:
            raise InvalidRequestError(
                f"the model's chat template rejected the messages: {exc}", param="messages"
            ) from exc
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _as_dict(message: Message) -> dict[str, str]:
    out = {"role": message.role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out

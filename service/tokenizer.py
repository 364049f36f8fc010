"""The model's chat template over its Hugging Face tokenizer (implements ChatTemplate).

The tokenizer is loaded by SGLang's own loader (``get_tokenizer``), as the engine loads it: the
prompt ids the service computes are the ones SGLang would, and SGLang's fixes for transformers 5
apply (a ``LlamaTokenizerFast`` config over a byte-level ``tokenizer.json``, DeepSeek-V3's, is
otherwise rebuilt with Llama's pre-tokenizer and encodes ``What is`` as ``Whatis``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from runtime_ext.formats import template_renders_tools, template_wants_string_arguments
from service.errors import InvalidRequestError
from service.types.request import Message, ToolDef

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


class HFChatTemplate:
    """Renders messages (and tools) with the tokenizer's own Jinja chat template."""

    def __init__(self, model_dir: Path, model_type: str | None):
        from sglang.srt.utils.hf_transformers.tokenizer import get_tokenizer

        self.tokenizer = get_tokenizer(str(model_dir))
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer in {model_dir} has no chat template")
        self.renders_tools = template_renders_tools(self.tokenizer.chat_template)
        self.string_arguments = template_wants_string_arguments(self.tokenizer.chat_template)
        self.model_type = model_type  # ModelInfo.model_type (config.json's)

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDef] = (),
        suffix: str = "",
        kwargs: tuple[tuple[str, Any], ...] = (),
    ) -> list[int]:
        """The prompt ids; ``suffix`` is appended after the generation prompt, ``kwargs``
        (the request's chat_template_kwargs) go to the template."""
        from jinja2 import TemplateError

        conversation = [_as_dict(m, self.string_arguments) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(
                conversation,
                tools=[_tool(t) for t in tools] or None,
                tokenize=False,
                add_generation_prompt=True,
                **dict(kwargs),
            )
        except (TemplateError, TypeError) as exc:
            raise InvalidRequestError(
                f"the model's chat template rejected the messages: {exc}", param="messages"
            ) from exc
        return self.encode(text + suffix)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        return [str(t) for t in self.tokenizer.convert_ids_to_tokens(list(ids))]


def _tool(tool: ToolDef) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters or EMPTY_PARAMETERS}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _as_dict(message: Message, string_arguments: bool = False) -> dict[str, Any]:
    """The message as the template reads it; a call's ``arguments`` as an object (what most
    templates read), or as the client's JSON text when the template concatenates it as text."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning is not None:  # the template decides what to render of it (Qwen3's does)
        out["reasoning_content"] = message.reasoning
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments if string_arguments else json.loads(c.arguments)},
            }
            for c in message.tool_calls
        ]
    return out

"""Custom tools (``{"type": "custom"}``) in OpenAI chat's shapes: ``ChatCompletionCustomToolParam``,
``ChatCompletionMessageCustomToolCallParam``, ``ChatCompletionNamedToolChoiceCustomParam``
(``openai.types.chat``).

NOT WIRED YET: ``ChatCompletionRequest`` does not accept these shapes. ``to_chat_request``
asks ``chat_accepts_custom_tools`` and, while it is False, raises
``CustomToolsNotSupportedError`` for a request that uses custom tools, custom tool calls or
their outputs. Once the chat model takes them, the conversion passes them through unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import ValidationError

from service.errors import UnsupportedParameterError
from service.protocol.openai import ChatCompletionRequest
from service.protocol.responses import CustomTool, CustomToolCallItem, TextFormat


class CustomToolsNotSupportedError(UnsupportedParameterError):
    """The request uses custom tools, which the chat pipeline does not accept yet (400)."""


def custom_tool(tool: CustomTool) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        spec["description"] = tool.description
    if tool.format is not None:
        fmt = tool.format
        spec["format"] = (
            {"type": "text"}
            if isinstance(fmt, TextFormat)
            else {"type": "grammar", "grammar": {"definition": fmt.definition, "syntax": fmt.syntax}}
        )
    return {"type": "custom", "custom": spec}


def custom_call(item: CustomToolCallItem) -> dict[str, Any]:
    return {"id": item.call_id, "type": "custom", "custom": {"name": item.name, "input": item.input}}


def custom_ref(name: str) -> dict[str, Any]:
    return {"type": "custom", "custom": {"name": name}}


@functools.cache
def chat_accepts_custom_tools() -> bool:
    """Whether ``ChatCompletionRequest`` takes a custom tool, a custom tool choice and a custom call."""
    probe = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [custom_call(CustomToolCallItem(call_id="c", name="t", input=""))],
            },
            {"role": "tool", "tool_call_id": "c", "content": ""},
        ],
        "tools": [custom_tool(CustomTool(name="t"))],
        "tool_choice": custom_ref("t"),
    }
    try:
        ChatCompletionRequest.model_validate(probe)
    except ValidationError:
        return False
    return True

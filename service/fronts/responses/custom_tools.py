"""Custom tools (``{"type": "custom"}``) in OpenAI chat's shapes: ``ChatCompletionCustomToolParam``,
``ChatCompletionMessageCustomToolCallParam``, ``ChatCompletionNamedToolChoiceCustomParam``
(``openai.types.chat``).

The conversion passes them through unchanged; the chat pipeline enforces them
(``service/pipeline/validate_tools.py``, docs/api.md "Custom tools").
"""

from __future__ import annotations

from typing import Any

from service.protocol.responses import CustomTool, CustomToolCallItem, TextFormat


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

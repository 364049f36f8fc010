"""Validate stage, tools part (used by ``validate.py`` only): ``tools`` / ``tool_choice`` /
``parallel_tool_calls`` and the tool turns of the conversation -> typed objects, or a 400
naming the field. A server without a tool-call format refuses ``tools`` here.

The ``parameters`` schemas are checked by the grammar policy in the constraints stage.
"""

from __future__ import annotations

import json

from runtime_ext.formats import ToolFormat
from service.errors import InvalidRequestError, UnsupportedParameterError
from service.protocol.openai import ChatCompletionRequest, ChatMessage, FunctionDef, NamedToolChoice, ToolChoice
from service.types import ToolCallRecord, ToolDef, ToolMode, ToolRequest


def validate_tools(req: ChatCompletionRequest, fmt: ToolFormat | None) -> ToolRequest | None:
    """None when the request has no tools (then tool_choice/parallel_tool_calls are errors)."""
    if req.tools is None:
        for field in ("tool_choice", "parallel_tool_calls"):
            if getattr(req, field) is not None:
                raise InvalidRequestError(f"'{field}' is only allowed when 'tools' are given", param=field)
        return None
    if not req.tools:
        raise InvalidRequestError("'tools' is empty; give at least one tool or leave 'tools' out", param="tools")
    tools = tuple(_tool(i, t.function) for i, t in enumerate(req.tools))
    names = [t.name for t in tools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InvalidRequestError(
                f"tools[{i}] repeats the function name '{name}'; tool names must be unique",
                param=f"tools.{i}.function.name",
            )
    mode, allowed = _choice(req.tool_choice, names)
    parallel = True if req.parallel_tool_calls is None else req.parallel_tool_calls
    return ToolRequest(tools=tools, mode=mode, allowed=allowed, parallel=parallel, format=_require_format(fmt))


def _tool(index: int, function: FunctionDef) -> ToolDef:
    params = function.parameters
    if params is not None and params.get("type", "object") != "object":
        raise InvalidRequestError(
            f"tools[{index}].function.parameters must be a JSON Schema of type 'object' "
            f"(the arguments are a JSON object), got type {params.get('type')!r}",
            param=f"tools.{index}.function.parameters",
        )
    return ToolDef(function.name, function.description, params, bool(function.strict))


def _choice(choice: ToolChoice | None, names: list[str]) -> tuple[ToolMode, tuple[str, ...]]:
    if choice is None or isinstance(choice, str):
        return choice or "auto", tuple(names)
    if isinstance(choice, NamedToolChoice):
        _known(choice.function.name, names, "tool_choice.function.name")
        return "named", (choice.function.name,)
    refs = choice.allowed_tools.tools
    if not refs:
        raise InvalidRequestError(
            "'tool_choice.allowed_tools.tools' is empty; list at least one tool",
            param="tool_choice.allowed_tools.tools",
        )
    allowed = []
    for i, ref in enumerate(refs):
        _known(ref.function.name, names, f"tool_choice.allowed_tools.tools.{i}.function.name")
        if ref.function.name not in allowed:
            allowed.append(ref.function.name)
    return choice.allowed_tools.mode, tuple(allowed)


def _require_format(fmt: ToolFormat | None) -> ToolFormat:
    """The served model's tool-call format; a server started without one refuses tools."""
    if fmt is None:
        raise UnsupportedParameterError(
            "this server has no tool-call format configured; send no 'tools'", param="tools"
        )
    return fmt


def _known(name: str, names: list[str], param: str) -> None:
    if name not in names:
        raise InvalidRequestError(
            f"tool_choice names the function '{name}', which is not in 'tools' (available: {', '.join(names)})",
            param=param,
        )


def tool_calls_of(msg: ChatMessage, index: int) -> tuple[ToolCallRecord, ...]:
    """The calls of an assistant message from history, arguments checked to be JSON objects."""
    if not msg.tool_calls:
        return ()
    if msg.role != "assistant":
        raise InvalidRequestError(
            f"messages[{index}] has 'tool_calls' but role '{msg.role}'; only assistant messages carry tool calls",
            param=f"messages.{index}.tool_calls",
        )
    out = []
    for j, call in enumerate(msg.tool_calls):
        try:
            ok = isinstance(json.loads(call.function.arguments), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise InvalidRequestError(
                f"messages[{index}].tool_calls[{j}].function.arguments must be a JSON object encoded as a string",
                param=f"messages.{index}.tool_calls.{j}.function.arguments",
            )
        out.append(ToolCallRecord(call.id, call.function.name, call.function.arguments))
    return tuple(out)


def check_tool_results(call_ids: set[str], msg: ChatMessage, index: int) -> None:
    """A ``tool`` message must answer a call of an earlier assistant message."""
    if not msg.tool_call_id:
        raise InvalidRequestError(
            f"messages[{index}] has role 'tool' but no 'tool_call_id'; set the id of the tool call it answers",
            param=f"messages.{index}.tool_call_id",
        )
    if msg.tool_call_id not in call_ids:
        raise InvalidRequestError(
            f"messages[{index}].tool_call_id '{msg.tool_call_id}' does not match any tool call "
            "of an earlier assistant message",
            param=f"messages.{index}.tool_call_id",
        )

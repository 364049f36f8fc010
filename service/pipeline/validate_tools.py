"""Validate stage, tools part (used by ``validate.py`` only): ``tools`` / ``tool_choice`` /
``parallel_tool_calls`` and the tool turns of the conversation -> typed objects, or a 400
naming the field. A server without a tool-call format refuses ``tools`` here.

The ``parameters`` schemas are checked by the grammar policy in the constraints stage.
"""

from __future__ import annotations

import json

from runtime_ext.formats import CallStyle, ToolFormat
from service.errors import InvalidRequestError, UnsupportedParameterError
from service.protocol.openai import (
    ChatCompletionRequest,
    ChatMessage,
    CustomFormatGrammar,
    CustomTool,
    CustomToolCall,
    FunctionDef,
    NamedCustomToolChoice,
    NamedToolChoice,
    Tool,
    ToolChoice,
)
from service.types.request import PatternKind, PatternOutputSpec, ToolCallRecord, ToolDef, ToolMode, ToolRequest

CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
"""How a custom tool is shown to the model's chat template: one string parameter."""


def validate_tools(req: ChatCompletionRequest, fmt: ToolFormat | None) -> ToolRequest | None:
    """None when the request has no tools (then tool_choice/parallel_tool_calls are errors)."""
    if req.tools is None:
        for field in ("tool_choice", "parallel_tool_calls"):
            if getattr(req, field) is not None:
                raise InvalidRequestError(f"'{field}' is only allowed when 'tools' are given", param=field)
        return None
    if not req.tools:
        raise InvalidRequestError("'tools' is empty; give at least one tool or leave 'tools' out", param="tools")
    tools = tuple(_any_tool(i, t) for i, t in enumerate(req.tools))
    names = [t.name for t in tools]
    for i, name in enumerate(names):
        if name in names[:i]:
            kind = "custom" if tools[i].kind == "custom" else "function"
            raise InvalidRequestError(
                f"tools[{i}] repeats the tool name '{name}'; tool names must be unique",
                param=f"tools.{i}.{kind}.name",
            )
    mode, allowed = _choice(req.tool_choice, tools)
    parallel = True if req.parallel_tool_calls is None else req.parallel_tool_calls
    before = sum(len(m.tool_calls or ()) for m in req.messages if m.role == "assistant")
    request = ToolRequest(tools, mode, allowed, parallel, _require_format(fmt), calls_before=before)
    _check_framed_custom(request)
    return request


def _check_framed_custom(tools: ToolRequest) -> None:
    """A custom tool callable under auto/required is framed as a call with one JSON string
    argument ``input``; the pythonic and XML formats write Python literals / raw values, which
    this does not cover."""
    framed = [t for t in tools.tools if t.kind == "custom" and t.name in tools.allowed and tools.forced_custom is None]
    style = tools.format.style
    if framed and tools.mode != "none" and style in (CallStyle.PYTHONIC, CallStyle.XML_PARAMS):
        raise UnsupportedParameterError(
            f"custom tool '{framed[0].name}' can be called under tool_choice '{tools.mode}' only in a JSON "
            f"tool-call format, and this model's is '{tools.format.name}' ({style.value}); name the custom tool "
            '(tool_choice {"type": "custom", "custom": {"name": ...}})',
            param="tool_choice",
        )


def _any_tool(index: int, tool: Tool | CustomTool) -> ToolDef:
    if isinstance(tool, Tool):
        return _tool(index, tool.function)
    c, grammar = tool.custom, None
    if isinstance(c.format, CustomFormatGrammar):
        g = c.format.grammar
        kind: PatternKind = "regex" if g.syntax == "regex" else "lark"
        param = f"tools.{index}.custom.format.grammar.definition"
        if not g.definition.strip():
            raise InvalidRequestError(f"'{param}' is empty; give the {g.syntax} grammar", param=param)
        grammar = PatternOutputSpec(kind, param, text=g.definition)
        hint = f"The input is text matching this {g.syntax} grammar:\n{g.definition}"
        return ToolDef(c.name, "\n\n".join(filter(None, [c.description, hint])), CUSTOM_INPUT, False, "custom", grammar)
    return ToolDef(c.name, c.description, CUSTOM_INPUT, False, kind="custom")


def _tool(index: int, function: FunctionDef) -> ToolDef:
    params = function.parameters
    if params is not None and params.get("type", "object") != "object":
        raise InvalidRequestError(
            f"tools[{index}].function.parameters must be a JSON Schema of type 'object' "
            f"(the arguments are a JSON object), got type {params.get('type')!r}",
            param=f"tools.{index}.function.parameters",
        )
    return ToolDef(function.name, function.description, params, bool(function.strict))


def _choice(choice: ToolChoice | None, tools: tuple[ToolDef, ...]) -> tuple[ToolMode, tuple[str, ...]]:
    mode, allowed = _named_or_listed(choice, [t.name for t in tools])
    custom = {t.name: t.kind == "custom" for t in tools}
    if isinstance(choice, (NamedToolChoice, NamedCustomToolChoice)):
        kind = "custom" if isinstance(choice, NamedCustomToolChoice) else "function"
        if custom[allowed[0]] != (kind == "custom"):
            other = "function" if kind == "custom" else "custom"
            raise InvalidRequestError(
                f"tool_choice names '{allowed[0]}' as a {kind} tool, but it is a {other} tool; "
                f'use {{"type": "{other}", "{other}": {{"name": "{allowed[0]}"}}}}',
                param=f"tool_choice.{kind}.name",
            )
    return mode, allowed


def _named_or_listed(choice: ToolChoice | None, names: list[str]) -> tuple[ToolMode, tuple[str, ...]]:
    if choice is None or isinstance(choice, str):
        return choice or "auto", tuple(names)
    if isinstance(choice, NamedToolChoice):
        _known(choice.function.name, names, "tool_choice.function.name")
        return "named", (choice.function.name,)
    if isinstance(choice, NamedCustomToolChoice):
        _known(choice.custom.name, names, "tool_choice.custom.name")
        return "named", (choice.custom.name,)
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
        if isinstance(call, CustomToolCall):  # shown to the template as its one string parameter
            out.append(ToolCallRecord(call.id, call.custom.name, json.dumps({"input": call.custom.input})))
            continue
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

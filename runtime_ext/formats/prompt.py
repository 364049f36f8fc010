"""The tools section written into the system prompt when a chat template has none.

Used with the ``generic`` format (e.g. SmolLM2, whose template ignores ``tools``);
the grammar then forces or triggers the exact syntax shown here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence, Union

from runtime_ext.formats.render import render_call
from runtime_ext.formats.spec import CallStyle, ToolFormat


@dataclass(frozen=True)
class NamedChoice:
    """``tool_choice`` naming one function that must be called."""

    name: str


ToolChoiceHint = Union[Literal["auto", "required", "none"], NamedChoice]

_PLACEHOLDER_ARGS = '{"ARGUMENT": VALUE}'


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function part of an OpenAI tool (``{"type": "function", "function": {...}}``)."""
    function = tool.get("function", tool)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError(f"not an OpenAI function tool: {tool!r}")
    return function


def _tool_line(function: Mapping[str, Any]) -> str:
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    line = f"- {function['name']}"
    description = str(function.get("description") or "").strip()
    if description:
        line += f": {description}"
    schema = json.dumps(parameters, ensure_ascii=False, separators=(",", ":"))
    return f"{line}\n  arguments JSON schema: {schema}"


def _choice_line(hint: ToolChoiceHint) -> str:
    if isinstance(hint, NamedChoice):
        return f"You must call the function {hint.name} now, with no other text."
    if hint == "required":
        return "You must call at least one function now, with no other text."
    if hint == "none":
        return "Do not call any function; answer in plain text."
    return "Call a function only when it helps; otherwise answer in plain text."


def render_tools_prompt(
    tools: Sequence[Mapping[str, Any]], fmt: ToolFormat, tool_choice_hint: ToolChoiceHint = "auto"
) -> str:
    """A concise system-prompt section describing ``tools`` and the call syntax of ``fmt``.

    ``tools`` are OpenAI tool objects (or bare function objects with ``name``,
    ``description``, ``parameters``). The text shows the exact syntax of one call
    in ``fmt`` and, for several calls, the separator. Raises ``ValueError`` for a
    tool without a function name. Deterministic: same input, same text.
    """
    functions = [_function(tool) for tool in tools]
    json_args = fmt.style not in (CallStyle.PYTHONIC, CallStyle.XML_PARAMS)
    placeholder = _PLACEHOLDER_ARGS if json_args else '{"ARGUMENT": "VALUE"}'
    example = render_call(fmt, "FUNCTION_NAME", placeholder)
    lines = ["You can call these functions:"]
    lines += [_tool_line(function) for function in functions]
    lines += [
        "",
        "To call a function, write exactly:",
        example,
        f"with the arguments as one JSON object matching the schema. "
        f"Several calls are separated by {json.dumps(fmt.separator)}.",
        _choice_line(tool_choice_hint),
    ]
    return "\n".join(lines)

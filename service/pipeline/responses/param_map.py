"""Chat ``param`` paths -> Responses ``param`` paths, for errors the chat pipeline raises on a
request that came in as ``POST /v1/responses``.

The conversion (``convert_request.py``) records where each chat message came from
(``MessageOrigin``); the rest of the request maps by rule: the wrappers chat adds
(``tools.i.function``, ``tool_choice.allowed_tools``, ``response_format.json_schema``) are
dropped and the renamed fields get their Responses names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HISTORY = "previous_response_id"  # where every message of an earlier response points

# a chat tool call's field -> the Responses call item's field
_CALL_FIELDS = {
    "id": "call_id",
    "function.name": "name",
    "function.arguments": "arguments",
    "custom.name": "name",
    "custom.input": "input",
}
_REWRITES = (
    (re.compile(r"^tools\.(\d+)\.(?:function|custom)(?=\.|$)"), r"tools.\1"),
    (re.compile(r"^tool_choice\.allowed_tools\.tools\.(\d+)\.(?:function|custom)(?=\.|$)"), r"tool_choice.tools.\1"),
    (re.compile(r"^tool_choice\.(?:allowed_tools|function|custom)(?=\.|$)"), "tool_choice"),
    (re.compile(r"^response_format\.json_schema(?=\.|$)"), "text.format"),
    (re.compile(r"^response_format(?=\.|$)"), "text.format"),
)
_GRAMMAR = re.compile(r"^(tools\.\d+\.format)\.grammar(?=\.|$)")  # chat nests a custom tool's grammar
_SAME = frozenset(
    {
        "model",
        "temperature",
        "top_p",
        "seed",
        "user",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "top_logprobs",
        "top_k",
        "min_p",
        "repetition_penalty",
        "bootstrap_host",
        "bootstrap_port",
        "bootstrap_room",
    }
)
_RENAMED = {
    "max_completion_tokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "reasoning_effort": "reasoning.effort",
    "max_reasoning_tokens": "reasoning.max_tokens",
    "logprobs": "include",
    "stream": "stream",
    "stream_options": "stream",
}


@dataclass(frozen=True)
class MessageOrigin:
    """Where one chat message came from: ``path`` is ``input.<i>`` (its first item),
    ``input`` (a string input), ``instructions`` or ``previous_response_id``; the others are
    the Responses paths of its parts (None: use ``path``)."""

    path: str
    content: str | None = None
    reasoning: str | None = None
    calls: tuple[str, ...] = ()  # the item path of each tool call, in order
    call_id: str | None = None  # a tool result's call_id


@dataclass(frozen=True)
class ParamMap:
    messages: tuple[MessageOrigin, ...] = ()

    def to_responses(self, param: str | None) -> str | None:
        """The Responses path of a chat ``param`` (None for one the conversion never sets)."""
        if param is None:
            return None
        head, _, rest = param.partition(".")
        if head == "messages":
            return self._message(rest)
        for pattern, replacement in _REWRITES:
            if pattern.match(param):
                return _GRAMMAR.sub(r"\1", pattern.sub(replacement, param, count=1))
        if head in _SAME:
            return param
        return _RENAMED.get(head)

    def _message(self, rest: str) -> str:
        index, _, field = rest.partition(".")
        if not index.isdigit() or int(index) >= len(self.messages):
            return "input"
        origin = self.messages[int(index)]
        name, _, sub = field.partition(".")
        if name == "content" and origin.content is not None:
            return f"{origin.content}.{sub}" if sub and origin.content.startswith("input.") else origin.content
        if name in ("reasoning", "reasoning_content"):
            return origin.reasoning or origin.path
        if name == "tool_call_id":
            return origin.call_id or origin.path
        if name == "tool_calls" and origin.calls:
            return _call_path(origin.calls, sub)
        if name == "role" and origin.path.startswith("input."):
            return f"{origin.path}.role"
        return origin.path


def _call_path(calls: tuple[str, ...], sub: str) -> str:
    index, _, field = sub.partition(".")
    if not index.isdigit() or int(index) >= len(calls):
        return calls[0]
    base = calls[int(index)]
    mapped = _CALL_FIELDS.get(field)
    return f"{base}.{mapped}" if mapped and base.startswith("input.") else base

"""Chat ``param`` paths -> Responses ``param`` paths, for errors the chat pipeline raises on a
request that came in as ``POST /v1/responses``.

The conversion (``convert_request.py``) records where each chat message came from
(``Origin``); the rest of the request maps by rule: the wrappers chat adds
(``tools.i.function``, ``tool_choice.allowed_tools``, ``response_format.json_schema``) are
dropped and the renamed fields get their Responses names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.fronts.base import Origin, ParamMap

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
class ResponsesParamMap(ParamMap):
    """``Origin.path`` is ``input.<i>`` (its first item), ``input`` (a string input),
    ``instructions`` or ``previous_response_id``."""

    REWRITES = _REWRITES
    SAME = _SAME
    RENAMED = _RENAMED
    OUTSIDE = "input"

    def rewritten(self, path: str) -> str:
        return _GRAMMAR.sub(r"\1", path)

    def content_path(self, content: str, sub: str) -> str:
        return f"{content}.{sub}" if sub and content.startswith("input.") else content

    def call_path(self, calls: tuple[str, ...], sub: str) -> str:
        index, _, field = sub.partition(".")
        if not index.isdigit() or int(index) >= len(calls):
            return calls[0]
        base = calls[int(index)]
        mapped = _CALL_FIELDS.get(field)
        return f"{base}.{mapped}" if mapped and base.startswith("input.") else base

    def other_path(self, origin: Origin, name: str) -> str:
        return f"{origin.path}.role" if name == "role" and origin.path.startswith("input.") else origin.path

"""Chat ``param`` paths -> Messages ``param`` paths (Anthropic style, ``messages.1.content.0.tool_use_id``),
for errors the chat pipeline raises on a request that came in as ``POST /v1/messages``.

The conversion (``convert_request.py``) records where each chat message came from
(``Origin``); the rest maps by rule: chat's wrappers (``tools.i.function``) are dropped and the
renamed fields get their Messages names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.fronts.base import ParamMap

_REWRITES = (
    (re.compile(r"^tools\.(\d+)\.function\.parameters(?=\.|$)"), r"tools.\1.input_schema"),
    (re.compile(r"^tools\.(\d+)\.function(?=\.|$)"), r"tools.\1"),
    (re.compile(r"^tool_choice\.function\.name$"), "tool_choice.name"),
    (re.compile(r"^tool_choice(?=\.|$)"), "tool_choice"),
)
_SAME = frozenset({"model", "temperature", "top_p", "top_k", "tools"})
_RENAMED = {
    "max_completion_tokens": "max_tokens",
    "max_tokens": "max_tokens",
    "max_reasoning_tokens": "thinking.budget_tokens",
    "enable_thinking": "thinking",
    "stop": "stop_sequences",
    "user": "metadata.user_id",
    "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
    "stream": "stream",
    "stream_options": "stream",
}


@dataclass(frozen=True)
class MessagesParamMap(ParamMap):
    """``Origin.path`` is ``system`` or ``messages.<i>``; a call's path is its ``tool_use`` block."""

    REWRITES = _REWRITES
    SAME = _SAME
    RENAMED = _RENAMED
    OUTSIDE = "messages"

    def call_path(self, calls: tuple[str, ...], sub: str) -> str:
        index, _, part = sub.partition(".")
        base = calls[int(index)] if index.isdigit() and int(index) < len(calls) else calls[0]
        return f"{base}.{'id' if part == 'id' else 'name' if part == 'function.name' else 'input'}"

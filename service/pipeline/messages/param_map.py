"""Chat ``param`` paths -> Messages ``param`` paths (Anthropic style, ``messages.1.content.0.tool_use_id``),
for errors the chat pipeline raises on a request that came in as ``POST /v1/messages``.

The conversion (``convert_request.py``) records where each chat message came from
(``Origin``); the rest maps by rule: chat's wrappers (``tools.i.function``) are dropped and the
renamed fields get their Messages names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
class Origin:
    """Where one chat message came from: ``path`` (``system``, ``messages.<i>``) and the paths
    of its parts (None: use ``path``)."""

    path: str
    content: str | None = None
    reasoning: str | None = None
    calls: tuple[str, ...] = ()  # the block path of each tool_use, in order
    call_id: str | None = None  # a tool_result's tool_use_id


@dataclass(frozen=True)
class MessagesParamMap:
    messages: tuple[Origin, ...] = ()

    def to_messages(self, param: str | None) -> str | None:
        """The Messages path of a chat ``param`` (None for one the conversion never sets)."""
        if param is None:
            return None
        head, _, rest = param.partition(".")
        if head == "messages":
            return self._message(rest)
        for pattern, replacement in _REWRITES:
            if pattern.match(param):
                return pattern.sub(replacement, param, count=1)
        if head in _SAME:
            return param
        return _RENAMED.get(head)

    def _message(self, rest: str) -> str:
        index, _, field = rest.partition(".")
        if not index.isdigit() or int(index) >= len(self.messages):
            return "messages"
        origin = self.messages[int(index)]
        name, _, sub = field.partition(".")
        if name == "content" and origin.content is not None:
            return origin.content
        if name in ("reasoning", "reasoning_content"):
            return origin.reasoning or origin.path
        if name == "tool_call_id":
            return origin.call_id or origin.path
        if name == "tool_calls" and origin.calls:
            index, _, part = sub.partition(".")
            base = origin.calls[int(index)] if index.isdigit() and int(index) < len(origin.calls) else origin.calls[0]
            return f"{base}.{'id' if part == 'id' else 'name' if part == 'function.name' else 'input'}"
        return origin.path

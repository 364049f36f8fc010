"""Typed results of tool-call parsing (streaming deltas and the final result).

Pure dataclasses, shared by every format's parser and by the SGLang adapter.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCallDelta:
    """One streaming increment of call ``index`` (OpenAI ``delta.tool_calls[]`` shape).

    The first delta of a call carries ``name`` (and ``arguments == ""``); later
    deltas carry ``name=None`` and a fragment of the arguments JSON text. The
    concatenation of a call's fragments equals ``ParsedToolCall.arguments`` once
    the call completes. The service adds ``id`` and ``type``.
    """

    index: int
    name: str | None
    arguments: str


@dataclass(frozen=True)
class ParseEvent:
    """What one ``feed``/``finish`` produced: text for the user and call deltas.

    ``content`` never contains marker text of a recognised call; text that might
    still become a marker is held back until decided.
    """

    content: str = ""
    calls: tuple[ToolCallDelta, ...] = ()


@dataclass(frozen=True)
class ParsedToolCall:
    """A complete call: ``arguments`` is compact JSON text of an object.

    ``arguments`` equals ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``
    of the parsed object (keys in generated order), except that duplicate keys
    are kept as written and unpaired surrogates stay ``\\uXXXX`` escapes.
    """

    index: int
    name: str
    arguments: str


@dataclass(frozen=True)
class ParseResult:
    """The whole output parsed: ``parse(fmt, text)`` == feed everything + finish.

    ``content``: the text for the user (concatenation of every event's content).
    ``calls``: complete calls in order; ``calls[i].index == i``.
    ``incomplete``: the text ended inside a call (cut by max_tokens), or a call
    whose name was already streamed turned out malformed. That call is not in
    ``calls`` (streamed deltas of it carry ``index == len(calls)``), nothing after
    it is parsed, and its raw text (markers included, up to the end of the
    output) is ``incomplete_text``.
    """

    content: str
    calls: list[ParsedToolCall] = field(default_factory=list)
    incomplete: bool = False
    incomplete_text: str = ""

"""The machinery every tool-call parser shares: pull-style reading and emission.

A format's parser is a generator (``Step``) reading ``core.text`` at ``core.pos``;
when it needs text that has not arrived yet it yields, and ``feed`` resumes it.
Every decision therefore depends only on the text, never on how it was chunked,
which is what makes ``parse(text)`` equal any streaming of the same text.

Content rules (all formats):
- text that may still become a marker is held back until decided;
- a whitespace run right before a call, or between a call and the end of the
  output, is dropped; other whitespace is content verbatim (so an output
  without calls is returned unchanged);
- a marker not followed by a well-formed call is content, as written.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Generator, Mapping, TypeVar

from runtime_ext.formats.spec import ToolFormat
from runtime_ext.parsers.types import ParsedToolCall, ParseEvent, ToolCallDelta

T = TypeVar("T")
Step = Generator[None, None, T]
WHITESPACE = " \t\n\r"
_KEEP = 4096


class Truncated(Exception):
    """The text ended inside a call."""


class Malformed(Exception):
    """A call whose name was already streamed cannot be completed."""


class Core:
    """Input buffer, read position and output bookkeeping of one parse."""

    def __init__(
        self,
        fmt: ToolFormat,
        tool_names: Collection[str] | None,
        schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.fmt = fmt
        self.names = None if tool_names is None else frozenset(tool_names)
        self.schemas = schemas  # tool name -> parameters schema (XML_PARAMS types values by it)
        self.text = ""
        self.pos = 0
        self.eof = False
        self.content: list[str] = []
        self.calls: list[ParsedToolCall] = []
        self.call_start: int | None = None
        self.incomplete = False
        self.bare_ok = True
        self._pending_ws = ""
        self._after_call = False
        self._group_base: int | None = None
        self._current: tuple[int, str, list[str]] | None = None
        self._event_content: list[str] = []
        self._event_calls: list[ToolCallDelta] = []

    # ---- reading -------------------------------------------------------------------
    def avail(self) -> int:
        """Characters available at ``pos``."""
        return len(self.text) - self.pos

    def peek(self) -> str:
        """The character at ``pos`` (callers made sure one is available)."""
        return self.text[self.pos]

    def fill(self, n: int) -> Step[int]:
        """Wait until ``n`` characters are available or the text ended; return avail."""
        while self.avail() < n and not self.eof:
            yield
        return self.avail()

    def need(self, n: int) -> Step[None]:
        """Wait for ``n`` characters; raise :class:`Truncated` if the text ends first."""
        if (yield from self.fill(n)) < n:
            raise Truncated

    def match(self, literal: str) -> Step[bool]:
        """Whether ``literal`` starts at ``pos`` (waits only while it still may)."""
        while True:
            have = self.text[self.pos : self.pos + len(literal)]
            if not literal.startswith(have):
                return False
            if len(have) == len(literal):
                return True
            if self.eof:
                return False
            yield

    def take(self, literal: str) -> Step[bool]:
        """Consume ``literal`` if it is next; raise :class:`Truncated` if the text ends inside it."""
        if (yield from self.match(literal)):
            self.pos += len(literal)
            return True
        if self.eof and literal.startswith(self.text[self.pos :]):
            raise Truncated
        return False

    def match_tail(self, literal: str) -> Step[int]:
        """Length of ``literal`` (or of its non-empty prefix ending the text) at ``pos``; 0 if absent."""
        if (yield from self.match(literal)):
            return len(literal)
        rest = self.text[self.pos :]
        return len(rest) if self.eof and rest and literal.startswith(rest) else 0

    def skip_ws(self) -> Step[None]:
        """Advance over whitespace (waits to see where the run ends)."""
        while (yield from self.fill(1)) and self.peek() in WHITESPACE:
            self.pos += 1

    def skip_ws_then(self, literal: str) -> Step[bool]:
        """Consume optional whitespace plus ``literal`` (or its prefix at the end of text).

        On a mismatch nothing is consumed and False is returned.
        """
        saved = self.pos
        yield from self.skip_ws()
        length = yield from self.match_tail(literal)
        if length:
            self.pos += length
            return True
        self.pos = saved
        return False

    def forget_parsed(self) -> None:
        """Drop text before ``pos`` when no call is open (keeps feeding O(chunk))."""
        if self.call_start is None and self.pos > _KEEP:
            self.text, self.pos = self.text[self.pos :], 0

    # ---- content ---------------------------------------------------------------
    def hold_ws(self, ws: str) -> None:
        """Hold a whitespace run until the next non-whitespace decides its fate."""
        self._pending_ws += ws

    def emit_text(self, text: str) -> None:
        """Emit ``text`` (with held whitespace before it) as content."""
        if not text:
            return
        out = self._pending_ws + text
        self._pending_ws = ""
        self.content.append(out)
        self._event_content.append(out)
        self._after_call = False
        self.bare_ok = False

    def end_of_text(self) -> None:
        """The text ended outside a call: release or drop held whitespace."""
        ws, self._pending_ws = self._pending_ws, ""
        if ws and not self._after_call:
            self.content.append(ws)
            self._event_content.append(ws)

    def begin(self, pos: int) -> None:
        """Record where a (possible) call's raw text starts."""
        self.call_start = pos

    def reject(self, end: int) -> None:
        """Not a call after all: its raw text up to ``end`` is content; continue there.

        Inside a group that has no call yet, the text after ``end`` stays
        unaccounted (``call_start = end``) so that separators and the closing
        marker of a group without calls become content too (``close_group``).
        """
        start = self.pos if self.call_start is None else self.call_start
        end = self._trim_ws(start, end)
        self.call_start = end if self._group_base == len(self.calls) else None
        self.pos = end
        self.emit_text(self.text[start:end])

    def _trim_ws(self, start: int, end: int) -> int:
        """``end`` moved before trailing whitespace (kept after ``start``), which the
        text loop then reads again and handles by the whitespace rules."""
        while end > start + 1 and self.text[end - 1] in WHITESPACE:
            end -= 1
        return end

    def open_group(self, pos: int) -> None:
        """A bracketed group of calls starts at ``pos`` (its opener)."""
        self.begin(pos)
        self._group_base = len(self.calls)

    def close_group(self) -> None:
        """The group ended at ``pos``: if it held no call, all of its text is content."""
        if self._group_base == len(self.calls) and self.call_start is not None:
            self.pos = self._trim_ws(self.call_start, self.pos)
            self.emit_text(self.text[self.call_start : self.pos])
        self.call_start = None
        self._group_base = None

    def known(self, name: str) -> bool:
        """Whether ``name`` is an allowed tool name (any name when none were given)."""
        return self.names is None or name in self.names

    # ---- calls -----------------------------------------------------------------
    def open_call(self, name: str) -> None:
        """Commit to a call: stream its name (drops whitespace held before it)."""
        self._pending_ws = ""
        index = len(self.calls)
        self._current = (index, name, [])
        self._event_calls.append(ToolCallDelta(index, name, ""))

    def add_arguments(self, fragment: str) -> None:
        """Stream an arguments fragment of the open call."""
        if not fragment or self._current is None:
            return
        index, _, parts = self._current
        parts.append(fragment)
        last = self._event_calls[-1] if self._event_calls else None
        if last is not None and last.index == index and last.name is None:
            self._event_calls[-1] = ToolCallDelta(index, None, last.arguments + fragment)
        else:
            self._event_calls.append(ToolCallDelta(index, None, fragment))

    def close_call(self) -> None:
        """The open call is complete."""
        assert self._current is not None
        index, name, parts = self._current
        self.calls.append(ParsedToolCall(index, name, "".join(parts)))
        self._current = None
        self.call_start = None
        self._after_call = True
        self.bare_ok = True

    def whole_call(self, name: str, arguments: str) -> None:
        """Emit a call decided in one piece (name delta, arguments delta, complete)."""
        self.open_call(name)
        self.add_arguments(arguments)
        self.close_call()

    def take_event(self) -> ParseEvent:
        """What was emitted since the last event."""
        event = ParseEvent("".join(self._event_content), tuple(self._event_calls))
        self._event_content, self._event_calls = [], []
        return event

    def incomplete_text(self) -> str:
        """Raw text of the unfinished call (from its start to the end of the text)."""
        return self.text[self.pos if self.call_start is None else self.call_start :]


def text_loop(core: Core, try_call: Callable[[], Step[bool]], starters: Callable[[], str]) -> Step[None]:
    """Scan free text; at a character in ``starters()`` ask ``try_call`` to read a call.

    ``try_call`` returns True when it consumed something (a call, or text it
    turned into content) and False, without moving ``pos``, when nothing starts here.
    """
    while True:
        core.forget_parsed()
        if not (yield from core.fill(1)):
            core.end_of_text()
            return
        text, pos = core.text, core.pos
        if text[pos] in WHITESPACE:
            end = pos
            while end < len(text) and text[end] in WHITESPACE:
                end += 1
            core.hold_ws(text[pos:end])
            core.pos = end
            continue
        special = starters()
        if text[pos] in special and (yield from try_call()):
            continue
        end = pos + 1
        while end < len(text) and text[end] not in WHITESPACE and text[end] not in special:
            end += 1
        core.pos = end
        core.emit_text(text[pos:end])


def marked_loop(core: Core, marker: str, body: Callable[[Core], Step[None]]) -> Step[None]:
    """``text_loop`` for styles whose calls start at one marker: at ``marker`` run ``body``."""

    def try_call() -> Step[bool]:
        if (yield from core.match(marker)):
            yield from body(core)
            return True
        return False

    yield from text_loop(core, try_call, lambda: marker[:1])

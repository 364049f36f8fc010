"""Streaming reasoning parser: splits a model output into reasoning and answer text.

``ReasoningParser(fmt, in_reasoning)`` takes text in chunks (``feed``) and returns
what is decided (``ReasoningEvent``); ``finish()`` flushes what was held back (a
partial marker at the end is text of the block it sits in, so reasoning cut off by
max_tokens is still returned). ``parse_reasoning`` = feed everything + finish, and
any chunking of the same text gives the same result. Pure.

``in_reasoning``: the output begins inside the block (the prompt opened it);
otherwise a block is recognised only at the very start of the output (after
whitespace). The end marker and the whitespace right after it are dropped; the
reasoning text is kept verbatim. A format's ``answer_headers`` (Harmony's
``<|channel|>final<|message|>``) are dropped where the answer starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from runtime_ext.formats.reasoning_formats import ReasoningFormat
from runtime_ext.parsers.streaming import parse_whole


class _Phase(Enum):
    """Where the parser is in the output."""

    BEFORE = "before"  # nothing decided yet: a block may still start
    REASONING = "reasoning"  # inside the block
    AFTER_END = "after_end"  # after the end marker, dropping the whitespace that follows it
    CONTENT = "content"  # the answer: everything else is content


_Piece = tuple[Literal["reasoning", "content"], str]


@dataclass(frozen=True)
class ReasoningEvent:
    reasoning: str = ""
    content: str = ""


@dataclass(frozen=True)
class ReasoningResult:
    reasoning: str
    content: str
    started: bool  # a reasoning block was open at some point
    ended: bool  # its end marker was seen


class ReasoningParser:
    def __init__(self, fmt: ReasoningFormat, in_reasoning: bool) -> None:
        self.fmt = fmt
        self._phase = _Phase.REASONING if in_reasoning else _Phase.BEFORE
        self._started = in_reasoning
        self._ended = False
        self._buffer = ""
        self._reasoning: list[str] = []
        self._content: list[str] = []

    def feed(self, chunk: str) -> ReasoningEvent:
        self._buffer += chunk
        return self._drain(final=False)

    def finish(self) -> ReasoningEvent:
        return self._drain(final=True)

    def result(self) -> ReasoningResult:
        return ReasoningResult("".join(self._reasoning), "".join(self._content), self._started, self._ended)

    def _drain(self, final: bool) -> ReasoningEvent:
        reasoning: list[str] = []
        content: list[str] = []
        while True:
            step = self._step(final)
            if step is None:
                break
            kind, text = step
            (reasoning if kind == "reasoning" else content).append(text)
        event = ReasoningEvent("".join(reasoning), "".join(content))
        self._reasoning.append(event.reasoning)
        self._content.append(event.content)
        return event

    def _step(self, final: bool) -> _Piece | None:
        """Consume one decided piece of the buffer, or None when nothing more is decided."""
        buf = self._buffer
        if not buf:
            return None
        if self._phase is _Phase.BEFORE:
            return self._before(buf, final)
        if self._phase is _Phase.REASONING:
            return self._inside(buf, final)
        if self._phase is _Phase.AFTER_END:
            return self._after_end(buf, final)
        self._buffer = ""
        return "content", buf

    def _after_end(self, buf: str, final: bool) -> _Piece | None:
        """Drop the whitespace after the end marker, then one of the format's answer headers."""
        stripped = buf.lstrip()
        if not stripped and not final:
            self._buffer = ""
            return None
        headers = self.fmt.answer_headers
        if not final and any(h.startswith(stripped) and h != stripped for h in headers):
            self._buffer = stripped
            return None  # still may become a header
        for header in headers:
            if stripped.startswith(header):
                stripped = stripped[len(header) :]
                break
        self._phase, self._buffer = _Phase.CONTENT, stripped
        return ("content", "") if stripped else None

    def _before(self, buf: str, final: bool) -> _Piece | None:
        head = buf.lstrip()
        start = self.fmt.start
        if head.startswith(start):
            self._phase, self._started, self._buffer = _Phase.REASONING, True, head[len(start) :]
            return "reasoning", ""
        if start.startswith(head) and not final:
            return None  # still may become the start marker
        self._phase = _Phase.CONTENT
        return "content", ""

    def _inside(self, buf: str, final: bool) -> _Piece | None:
        end = self.fmt.end
        at = buf.find(end)
        if at >= 0:
            self._phase, self._ended, self._buffer = _Phase.AFTER_END, True, buf[at + len(end) :]
            return "reasoning", buf[:at]
        keep = 0 if final else _partial_suffix(buf, end)
        if keep == len(buf):
            return None
        self._buffer = buf[len(buf) - keep :]
        return "reasoning", buf[: len(buf) - keep]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def parse_reasoning(fmt: ReasoningFormat, text: str, in_reasoning: bool) -> ReasoningResult:
    """Split a whole output at once (same result as any streaming of ``text``)."""
    return parse_whole(ReasoningParser(fmt, in_reasoning), text)

"""Streaming reasoning parser: splits a model output into reasoning and answer text.

``ReasoningParser(fmt, in_reasoning)`` takes text in chunks (``feed``) and returns
what is decided (``ReasoningEvent``); ``finish()`` flushes what was held back (a
partial marker at the end is text of the block it sits in, so reasoning cut off by
max_tokens is still returned). ``parse_reasoning`` = feed everything + finish, and
any chunking of the same text gives the same result. Pure.

``in_reasoning``: the output begins inside the block (the prompt opened it);
otherwise a block is recognised only at the very start of the output (after
whitespace). The end marker and the whitespace right after it are dropped; the
reasoning text is kept verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime_ext.formats.reasoning import ReasoningFormat

_BEFORE, _REASONING, _AFTER_END, _CONTENT = range(4)


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
        self._state = _REASONING if in_reasoning else _BEFORE
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
        reasoning, content = [], []
        while True:
            step = self._step(final)
            if step is None:
                break
            kind, text = step
            (reasoning if kind == "r" else content).append(text)
        event = ReasoningEvent("".join(reasoning), "".join(content))
        self._reasoning.append(event.reasoning)
        self._content.append(event.content)
        return event

    def _step(self, final: bool) -> tuple[str, str] | None:
        """Consume one decided piece of the buffer, or None when nothing more is decided."""
        buf = self._buffer
        if not buf:
            return None
        if self._state == _BEFORE:
            return self._before(buf, final)
        if self._state == _REASONING:
            return self._inside(buf, final)
        if self._state == _AFTER_END:
            stripped = buf.lstrip()
            if not stripped and not final:
                self._buffer = ""
                return None
            self._state, self._buffer = _CONTENT, stripped
            return ("c", "") if stripped else None
        self._buffer = ""
        return "c", buf

    def _before(self, buf: str, final: bool) -> tuple[str, str] | None:
        head = buf.lstrip()
        start = self.fmt.start
        if head.startswith(start):
            self._state, self._started, self._buffer = _REASONING, True, head[len(start):]
            return "r", ""
        if start.startswith(head) and not final:
            return None  # still may become the start marker
        self._state = _CONTENT
        return "c", ""

    def _inside(self, buf: str, final: bool) -> tuple[str, str] | None:
        end = self.fmt.end
        at = buf.find(end)
        if at >= 0:
            self._state, self._ended, self._buffer = _AFTER_END, True, buf[at + len(end):]
            return "r", buf[:at]
        keep = 0 if final else _partial_suffix(buf, end)
        if keep == len(buf):
            return None
        self._buffer = buf[len(buf) - keep:]
        return "r", buf[: len(buf) - keep]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def parse_reasoning(fmt: ReasoningFormat, text: str, in_reasoning: bool) -> ReasoningResult:
    parser = ReasoningParser(fmt, in_reasoning)
    parser.feed(text)
    parser.finish()
    return parser.result()

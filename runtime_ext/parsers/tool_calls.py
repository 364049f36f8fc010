"""Streaming tool-call parsing for every registered format.

``ToolCallParser(fmt, tool_names)`` takes the model's text in chunks (``feed``) and
returns, per chunk, the content to stream and OpenAI-shaped call deltas;
``finish()`` flushes; ``result()`` is the whole :class:`ParseResult`.
``parse(fmt, text)`` is exactly ``feed(text)`` + ``finish()``, and any chunking of
the same text yields the same content and the same per-call (name, arguments).

Decisions (the same for every format):
- **arguments**: streamed as fragments of compact canonical JSON while the raw
  text arrives (pythonic: one fragment per call); their concatenation is
  ``ParsedToolCall.arguments``, i.e. ``json.dumps(obj, ensure_ascii=False,
  separators=(",", ":"))`` of the arguments object the model wrote.
- **unknown tool names** (only when ``tool_names`` is given): such a call is not a
  call; its raw text, markers included, is content, so nothing the model wrote is
  silently lost (with a tool-call grammar this cannot happen). In a bracketed
  group (mistral array, deepseek section, pythonic list) the rejected element is
  content; a group that holds no call at all is content in full.
- **text at the end**: a partial start marker at the very end is content (it
  never became a marker); a complete start marker at the end is an incomplete call.
- **incomplete calls**: when the text ends inside a call (max_tokens), the call
  is not in ``ParseResult.calls``; ``incomplete`` is True and ``incomplete_text``
  holds its raw text. Deltas already streamed for it carry ``index == len(calls)``.
  Missing closing markers after a complete call are tolerated.
- **malformed calls**: a call that is not well formed before its name was streamed
  is content; one that breaks afterwards ends parsing as an incomplete call.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Generator, Mapping

from runtime_ext.formats import CallStyle, ToolFormat, get_format
from runtime_ext.parsers.core import Core, Malformed, Step, Truncated
from runtime_ext.parsers.deepseek import run_named_blocks
from runtime_ext.parsers.harmony import run_harmony
from runtime_ext.parsers.json_styles import run_sequence, run_tagged
from runtime_ext.parsers.mistral import run_array
from runtime_ext.parsers.pythonic import run_pythonic
from runtime_ext.parsers.streaming import parse_whole
from runtime_ext.parsers.types import ParsedToolCall, ParseEvent, ParseResult, ToolCallDelta
from runtime_ext.parsers.xml_params import run_xml_params

_RUNNERS: dict[CallStyle, Callable[[Core], Step[None]]] = {
    CallStyle.TAGGED: run_tagged,
    CallStyle.JSON_SEQUENCE: run_sequence,
    CallStyle.JSON_ARRAY: run_array,
    CallStyle.NAMED_BLOCKS: run_named_blocks,
    CallStyle.PYTHONIC: run_pythonic,
    CallStyle.XML_PARAMS: run_xml_params,
    CallStyle.HARMONY: run_harmony,
}


class ParserFinishedError(RuntimeError):
    """``feed``/``finish`` after ``finish``, or ``result`` before it."""


class ToolCallParser:
    """Incremental parser of one model output in format ``fmt``.

    ``fmt``: a :class:`ToolFormat` or a registered name. ``tool_names``: the
    allowed function names (None: any name is accepted). ``tool_schemas``: each
    tool's ``parameters`` schema, which types the raw argument values of the XML
    formats (``parsers.xml_params``; other formats write JSON and ignore it).
    """

    def __init__(
        self,
        fmt: ToolFormat | str,
        tool_names: Collection[str] | None = None,
        tool_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.format = get_format(fmt)
        self._core = Core(self.format, tool_names, tool_schemas)
        self._steps = self._run(_RUNNERS[self.format.style])
        self._running = True
        self._finished = False

    def _run(self, runner: Callable[[Core], Step[None]]) -> Generator[None, None, None]:
        try:
            yield from runner(self._core)
        except (Truncated, Malformed):
            self._core.incomplete = True

    def _advance(self) -> None:
        if not self._running:
            return
        try:
            next(self._steps)
        except StopIteration:
            self._running = False

    def feed(self, chunk: str) -> ParseEvent:
        """Add text; return the content and call deltas now decided."""
        if self._finished:
            raise ParserFinishedError("feed() after finish()")
        if chunk:
            self._core.text += chunk
            self._advance()
        return self._core.take_event()

    def finish(self) -> ParseEvent:
        """The output is complete: decide everything held back."""
        if self._finished:
            raise ParserFinishedError("finish() called twice")
        self._finished = True
        self._core.eof = True
        self._advance()
        return self._core.take_event()

    def result(self) -> ParseResult:
        """The whole output parsed (only after ``finish``)."""
        if not self._finished:
            raise ParserFinishedError("result() before finish()")
        core = self._core
        return ParseResult(
            content="".join(core.content),
            calls=list(core.calls),
            incomplete=core.incomplete,
            incomplete_text=core.incomplete_text() if core.incomplete else "",
        )


def parse(
    fmt: ToolFormat | str,
    text: str,
    tool_names: Collection[str] | None = None,
    tool_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> ParseResult:
    """Parse a whole output at once (same result as any streaming of ``text``)."""
    return parse_whole(ToolCallParser(fmt, tool_names, tool_schemas), text)


__all__ = [
    "ParseEvent",
    "ParseResult",
    "ParsedToolCall",
    "ParserFinishedError",
    "ToolCallDelta",
    "ToolCallParser",
    "parse",
]

"""The streaming contract shared by every parser here (tool calls, reasoning). Pure.

A parser reads one model output in chunks: ``feed(chunk)`` returns what the text so
far decided (text that may still become a marker is held back), ``finish()`` decides
the rest, ``result()`` (after ``finish``) is the whole output parsed. Every parser
guarantees that its result, and what its events add up to, do not depend on how the
text was chunked (``tests/unit/runtime_ext/test_parser_split_parity.py`` checks it
for every parser in ``runtime_ext.parsers.catalog``).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

EventT_co = TypeVar("EventT_co", covariant=True)
ResultT_co = TypeVar("ResultT_co", covariant=True)
ResultT = TypeVar("ResultT")


class StreamingParser(Protocol[EventT_co, ResultT_co]):
    """``feed``/``finish`` return events; ``result`` the whole output (see module doc)."""

    def feed(self, chunk: str) -> EventT_co:
        """Add text; return what is now decided."""
        ...

    def finish(self) -> EventT_co:
        """The output is complete: return everything held back."""
        ...

    def result(self) -> ResultT_co:
        """The whole output parsed (after ``finish``)."""
        ...


def parse_whole(parser: StreamingParser[object, ResultT], text: str) -> ResultT:
    """``text`` fed at once, then finished: the result any chunking of it gives."""
    parser.feed(text)
    parser.finish()
    return parser.result()

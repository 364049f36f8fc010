"""Every streaming parser the service builds: one entry per parser kind and registered format.

Tests run their contract over this list (``test_parser_split_parity.py``), so a format
added to a registry (``formats.tool_formats``, ``formats.reasoning_formats``) or a
parser kind added here is covered without touching the tests. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from runtime_ext.formats import (
    FORMAT_NAMES,
    REASONING_FORMATS,
    ReasoningFormat,
    ToolFormat,
    get_format,
)
from runtime_ext.parsers.reasoning_parser import ReasoningParser
from runtime_ext.parsers.streaming import StreamingParser
from runtime_ext.parsers.tool_calls import ToolCallParser

ParserKind = Literal["tool_calls", "reasoning"]


@dataclass(frozen=True)
class ParserEntry:
    """One parser: its kind, its format, and ``new()`` building a fresh one."""

    kind: ParserKind
    fmt: ToolFormat | ReasoningFormat
    new: Callable[[], StreamingParser[Any, Any]]

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.fmt.name}"


def streaming_parsers(
    tool_names: Collection[str] | None = None,
    in_reasoning: bool = True,
    reasoning_formats: Iterable[ReasoningFormat] = (),
    tool_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> tuple[ParserEntry, ...]:
    """A parser per registered tool-call format and per reasoning format, built with the
    options the service passes (``tool_names``; ``in_reasoning``; ``tool_schemas``).
    ``reasoning_formats``: formats to add to the registered ones (e.g. a configured
    ``generic`` pair)."""
    tool_formats = [get_format(name) for name in FORMAT_NAMES]
    entries = [ParserEntry("tool_calls", f, partial(ToolCallParser, f, tool_names, tool_schemas)) for f in tool_formats]
    for fmt in (*REASONING_FORMATS.values(), *reasoning_formats):
        entries.append(ParserEntry("reasoning", fmt, partial(ReasoningParser, fmt, in_reasoning)))
    return tuple(entries)

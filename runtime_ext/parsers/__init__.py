"""Streaming parsers (pure: no torch, sglang, fastapi or xgrammar) and the SGLang adapter.

Tool calls (``tool_calls``) and reasoning blocks (``reasoning_parser``) follow one
contract, :class:`StreamingParser`; ``catalog`` lists every parser built from the
registered formats. ``runtime_ext.parsers.sglang_adapter`` is the only module here that
touches SGLang, and only inside ``register_tool_parsers()``.
"""

from runtime_ext.parsers.catalog import ParserEntry, ParserKind, streaming_parsers
from runtime_ext.parsers.reasoning_parser import (
    ReasoningEvent,
    ReasoningParser,
    ReasoningResult,
    parse_reasoning,
)
from runtime_ext.parsers.streaming import StreamingParser, parse_whole
from runtime_ext.parsers.tool_calls import (
    ParsedToolCall,
    ParseEvent,
    ParseResult,
    ParserFinishedError,
    ToolCallDelta,
    ToolCallParser,
    parse,
)

__all__ = [
    "ParseEvent",
    "ParseResult",
    "ParsedToolCall",
    "ParserEntry",
    "ParserFinishedError",
    "ParserKind",
    "ReasoningEvent",
    "ReasoningParser",
    "ReasoningResult",
    "StreamingParser",
    "ToolCallDelta",
    "ToolCallParser",
    "parse",
    "parse_reasoning",
    "parse_whole",
    "streaming_parsers",
]

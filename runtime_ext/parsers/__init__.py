"""Tool-call parsers (pure: no torch, sglang, fastapi or xgrammar) and the SGLang adapter.

``runtime_ext.parsers.sglang_adapter`` is the only module here that touches SGLang,
and only inside ``register_tool_parsers()``.
"""

from runtime_ext.parsers.tool_calls import (
    ParseEvent,
    ParseResult,
    ParsedToolCall,
    ParserFinishedError,
    ToolCallDelta,
    ToolCallParser,
    parse,
)

__all__ = [
    "ParseEvent",
    "ParseResult",
    "ParsedToolCall",
    "ParserFinishedError",
    "ToolCallDelta",
    "ToolCallParser",
    "parse",
]

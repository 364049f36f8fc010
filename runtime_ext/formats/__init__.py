"""Tool-call formats: one frozen spec per model family, shared by parsers and grammars.

Pure: imports neither torch, sglang, fastapi nor xgrammar.
"""

from runtime_ext.formats.prompt import NamedChoice, ToolChoiceHint, render_tools_prompt
from runtime_ext.formats.registry import FORMAT_NAMES, get_format
from runtime_ext.formats.render import (
    CallSpan,
    call_frame,
    group_frame,
    python_literal,
    render_call,
    render_calls,
    render_calls_with_spans,
)
from runtime_ext.formats.select import ToolFormatSelectionError, select_format
from runtime_ext.formats.spec import CallStyle, ToolFormat, UnknownFormatError
from runtime_ext.formats.templates import template_renders_tools

__all__ = [
    "FORMAT_NAMES",
    "CallSpan",
    "CallStyle",
    "NamedChoice",
    "ToolChoiceHint",
    "ToolFormat",
    "ToolFormatSelectionError",
    "UnknownFormatError",
    "call_frame",
    "get_format",
    "group_frame",
    "python_literal",
    "render_call",
    "render_calls",
    "render_calls_with_spans",
    "render_tools_prompt",
    "select_format",
    "template_renders_tools",
]

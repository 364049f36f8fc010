"""Tool-call and reasoning formats (one frozen spec each, shared by parsers and grammars)
and the model families that use them (``families``: one record per family).

Pure: imports neither torch, sglang, fastapi nor xgrammar.
"""

from runtime_ext.formats.families import (
    MODEL_FAMILIES,
    ModelFamily,
    ToolFormatSelectionError,
    select_format,
    select_reasoning_format,
)
from runtime_ext.formats.prompt import NamedChoice, ToolChoiceHint, render_tools_prompt
from runtime_ext.formats.reasoning_formats import (
    REASONING_FORMATS,
    ReasoningFormat,
    UnknownReasoningFormatError,
    get_reasoning_format,
)
from runtime_ext.formats.render import (
    CallSpan,
    call_frame,
    group_frame,
    python_literal,
    render_call,
    render_calls,
    render_calls_with_spans,
)
from runtime_ext.formats.spec import CallStyle, ToolFormat, UnknownFormatError
from runtime_ext.formats.templates import template_renders_tools, template_wants_string_arguments
from runtime_ext.formats.tool_formats import FORMAT_NAMES, get_format

__all__ = [
    "FORMAT_NAMES",
    "MODEL_FAMILIES",
    "REASONING_FORMATS",
    "CallSpan",
    "CallStyle",
    "ModelFamily",
    "NamedChoice",
    "ReasoningFormat",
    "ToolChoiceHint",
    "ToolFormat",
    "ToolFormatSelectionError",
    "UnknownFormatError",
    "UnknownReasoningFormatError",
    "call_frame",
    "get_format",
    "get_reasoning_format",
    "group_frame",
    "python_literal",
    "render_call",
    "render_calls",
    "render_calls_with_spans",
    "render_tools_prompt",
    "select_format",
    "select_reasoning_format",
    "template_renders_tools",
    "template_wants_string_arguments",
]

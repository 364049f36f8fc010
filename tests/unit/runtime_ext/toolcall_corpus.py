"""Hypothesis strategies: model outputs rendered in a tool-call format, with the expected parse.

A sample is ``before + ws + calls + ws + after`` where the calls are generated
data rendered by ``runtime_ext.formats`` (with randomised but valid whitespace and
JSON styles), optionally cut inside the last call's arguments (max_tokens) or
inside its trailing markers.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from runtime_ext.formats import CallStyle, ToolFormat, render_calls_with_spans
from runtime_ext.formats.tool_formats import DEEPSEEK_CALL_END, DEEPSEEK_CALLS_BEGIN, DEEPSEEK_SEP

WS = " \t\n\r"
MARKERY = [
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    DEEPSEEK_CALLS_BEGIN,
    DEEPSEEK_CALL_END,
    DEEPSEEK_SEP,
    "```",
    "\n```",
    '{"name": "x", "arguments": {}}',
    "f(a=1)",
]
TRICKY = MARKERY + [
    '"',
    "\\",
    "\n",
    "\t",
    "}",
    "]",
    "{",
    "[",
    ";",
    ",",
    "'",
    "é",
    "中",
    "😀",
    "\x00",
    "\x1f",
    "\u2028",
    "\\u0041",
]
PARTIAL_MARKERS = ["<tool_", "<tool_cal", "</tool", "[TOOL_CALL", "[TOOL", "<|python_ta", "<\uff5ctool\u2581calls", "<"]


@dataclass(frozen=True)
class Sample:
    """A rendered output and what parsing it must give."""

    text: str
    content: str
    calls: list[tuple[str, dict[str, Any]]]
    incomplete: bool
    incomplete_text: str


def compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


strings = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(TRICKY)), max_size=4).map("".join)
identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)


def json_values(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=6
    )


def arguments(fmt: ToolFormat) -> st.SearchStrategy[dict[str, Any]]:
    keys = identifiers if fmt.style is CallStyle.PYTHONIC else strings
    return st.dictionaries(keys, json_values(strings), max_size=4)


def content_text(fmt: ToolFormat) -> st.SearchStrategy[str]:
    """Free text (no leading/trailing whitespace) that holds no marker of ``fmt``."""
    alphabet = st.sampled_from(list("abcXYZ019 \n<>[]{}|_/.,;!?:-é中😀"))
    pieces = st.lists(st.one_of(alphabet, st.sampled_from(PARTIAL_MARKERS)), max_size=12).map("".join)
    return pieces.map(lambda s: s.strip(WS)).filter(lambda s: not fmt.opener or fmt.opener not in s)


def _separators(fmt: ToolFormat) -> st.SearchStrategy[str]:
    ws = st.sampled_from(["", " ", "\n", "\n\n", " \t"])
    if fmt.style is CallStyle.JSON_SEQUENCE:
        return st.tuples(ws, ws).map(lambda p: p[0] + ";" + p[1])
    if fmt.style in (CallStyle.JSON_ARRAY, CallStyle.PYTHONIC):
        return st.tuples(ws, ws).map(lambda p: p[0] + "," + p[1])
    return ws


def _json_text(draw: st.DrawFn, obj: dict[str, Any]) -> str:
    indent, separators = draw(st.sampled_from([(None, (", ", ": ")), (None, (",", ":")), (2, (",", ": "))]))
    return json.dumps(obj, ensure_ascii=draw(st.booleans()), indent=indent, separators=separators)


def _render_variant(draw: st.DrawFn, fmt: ToolFormat, before: str) -> tuple[ToolFormat, str]:
    """A valid spelling of ``fmt`` for rendering, and a prefix before the calls."""
    variant = dataclasses.replace(
        fmt,
        separator=draw(_separators(fmt)),
        padding=draw(st.sampled_from(["", "\n", " "])) if fmt.style is CallStyle.TAGGED else fmt.padding,
        json_separators=draw(st.sampled_from([(", ", ": "), (",", ":"), (",\n ", " : ")])),
    )
    if fmt.style is CallStyle.TAGGED and fmt.bare_calls and not before and draw(st.booleans()):
        return dataclasses.replace(variant, call_start="", call_end="", padding=""), ""
    if fmt.style is CallStyle.JSON_SEQUENCE and (before or draw(st.booleans())):
        return variant, fmt.call_start
    return variant, ""


@st.composite
def samples(draw: st.DrawFn, fmt: ToolFormat) -> Sample:
    """One output in ``fmt`` with its expected ``ParseResult``."""
    calls = draw(st.lists(st.tuples(identifiers, arguments(fmt)), max_size=3))
    at_start_only = fmt.style is CallStyle.PYTHONIC
    before = "" if at_start_only else draw(content_text(fmt))
    after = draw(content_text(fmt).filter(lambda s: not s.startswith((";", ",", "[", "{"))))
    ws1, ws2 = draw(st.sampled_from(["", " ", "\n", "\n\n"])), draw(st.sampled_from(["", " ", "\n"]))
    if not calls:
        text = before + ws1 + ws2 + after
        return Sample(text, text, [], False, "")
    variant, lead = _render_variant(draw, fmt, before)
    block, spans = render_calls_with_spans(variant, [(name, _json_text(draw, obj)) for name, obj in calls])
    block, head = lead + block, before + ws1
    cut = draw(st.sampled_from(["none", "args", "trailer"]))
    last = spans[-1]
    if cut == "args":
        low, high = (last.args_start, last.args_end) if at_start_only else (last.args_start + 1, last.args_end - 1)
        at = draw(st.integers(low, max(low, high)))
        start = last.start + (len(lead) if last.start else 0)
        return Sample(head + block[: len(lead) + at], before, calls[:-1], True, block[start : len(lead) + at])
    if cut == "trailer" and last.end < len(block) - len(lead):
        at = draw(st.integers(last.end, len(block) - len(lead) - 1)) + len(lead)
        return Sample(head + block[:at], before, calls, False, "")
    return Sample(head + block + ws2 + after, before + (ws2 + after if after else ""), calls, False, "")

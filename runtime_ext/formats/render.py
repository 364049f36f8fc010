"""Canonical rendering of tool calls in a format: the exact text grammars force.

Used by the tool prompt, by grammar tests (accepted strings) and parser tests
(generated corpora). Arguments are passed as JSON text of an object and are
inserted verbatim (JSON styles) or converted to Python literals (pythonic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from runtime_ext.formats.spec import CallStyle, ToolFormat


@dataclass(frozen=True)
class CallSpan:
    """Where one rendered call sits in the rendered text (half-open offsets).

    ``start``: where the call's raw text begins, as ``ParseResult.incomplete_text``
    reports it when the call is cut (the group opener for a group's first call).
    ``args_start``/``args_end``: the arguments text. ``end``: the call is complete
    once the text reaches here (trailing markers after it are optional at EOF).
    """

    start: int
    args_start: int
    args_end: int
    end: int


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def python_literal(value: Any) -> str:
    """A Python literal for a JSON value (``true`` -> ``True``, dicts, lists, …)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float, str)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def xml_value(value: Any) -> str:
    """An XML_PARAMS argument value as written: a string raw, anything else compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _xml_pieces(fmt: ToolFormat, name: str, arguments: str) -> tuple[str, str, str, str]:
    params = json.loads(arguments)
    args = "".join(f"{fmt.key_start}{k}{fmt.key_end}{xml_value(v)}{fmt.value_end}" for k, v in params.items())
    closing = fmt.call_end.split()[0]
    at = fmt.call_end.index(closing) + len(closing)
    return fmt.call_start + name + fmt.name_end, args, fmt.call_end[:at], fmt.call_end[at:]


def _pieces(fmt: ToolFormat, name: str, arguments: str, index: int = 0) -> tuple[str, str, str, str]:
    """(head, args, tail_to_end, trailer): call number ``index``; ``end`` is after tail_to_end."""
    item, key = fmt.json_separators
    if fmt.style is CallStyle.XML_PARAMS:
        return _xml_pieces(fmt, name, arguments)
    if fmt.style is CallStyle.PYTHONIC:
        kwargs = json.loads(arguments)
        args = ", ".join(f"{k}={python_literal(v)}" for k, v in kwargs.items())
        return f"{name}(", args, ")", ""
    if fmt.style is CallStyle.NAMED_BLOCKS:
        counter = f"{fmt.index_sep}{index}" if fmt.index_sep else ""
        return fmt.call_start + name + counter + fmt.name_end, arguments, "", fmt.arguments_end + fmt.call_end
    if fmt.style is CallStyle.HARMONY:
        return fmt.call_start + name + fmt.name_end, arguments, "", fmt.call_end
    head = "{" + _q(fmt.name_key) + key + _q(name) + item + _q(fmt.arguments_key) + key
    if fmt.style is CallStyle.TAGGED:
        return fmt.call_start + fmt.padding + head, arguments, "}", fmt.padding + fmt.call_end
    return head, arguments, "}", ""


def _group(fmt: ToolFormat) -> tuple[str, str]:
    """Text before the first call and after the last one."""
    if fmt.style is CallStyle.JSON_ARRAY:
        return fmt.call_start + fmt.padding + "[", "]"
    if fmt.style is CallStyle.NAMED_BLOCKS:
        return fmt.section_start + fmt.padding, fmt.padding + fmt.section_end
    if fmt.style is CallStyle.PYTHONIC:
        return "[", "]"
    return "", ""


def call_frame(fmt: ToolFormat, name: str) -> tuple[str, str]:
    """(text before, text after) the arguments JSON of one canonical call of ``name``.

    The group text (``group_frame``) and separators are not included. Not for
    PYTHONIC, whose arguments are not JSON (raises ValueError).
    """
    if fmt.style is CallStyle.PYTHONIC:
        raise ValueError("pythonic calls have no JSON arguments frame")
    head, _, tail, trailer = _pieces(fmt, name, "{}")
    return head, tail + trailer


def group_frame(fmt: ToolFormat) -> tuple[str, str]:
    """(text before the first call, text after the last call) of a group of calls."""
    return _group(fmt)


def render_calls_with_spans(fmt: ToolFormat, calls: Sequence[tuple[str, str]]) -> tuple[str, list[CallSpan]]:
    """Render ``(name, arguments_json)`` calls; also return each call's span."""
    opening, closing = _group(fmt)
    out: list[str] = [opening]
    spans: list[CallSpan] = []
    length = len(opening)
    for i, (name, arguments) in enumerate(calls):
        if i:
            out.append(fmt.separator)
            length += len(fmt.separator)
        head, args, tail, trailer = _pieces(fmt, name, arguments, i)
        start = 0 if i == 0 else length
        args_start = length + len(head)
        args_end = args_start + len(args)
        spans.append(CallSpan(start, args_start, args_end, args_end + len(tail)))
        out += [head, args, tail, trailer]
        length = spans[-1].end + len(trailer)
    out.append(closing)
    return "".join(out), spans


def render_calls(fmt: ToolFormat, calls: Sequence[tuple[str, str]]) -> str:
    """The canonical text of ``calls`` (``(name, arguments_json)`` pairs) in ``fmt``."""
    return render_calls_with_spans(fmt, calls)[0]


def render_call(fmt: ToolFormat, name: str, arguments: str = "{}") -> str:
    """The canonical text of a single call in ``fmt``."""
    return render_calls(fmt, [(name, arguments)])

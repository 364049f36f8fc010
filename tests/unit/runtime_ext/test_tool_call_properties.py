"""Property tests: for every format, parse == char-by-char streaming == every split.

Outputs are generated data rendered in the format (several calls, ``{}`` arguments,
nested values, strings with quotes/backslashes/unicode/newlines/marker text, text
around calls, calls cut by max_tokens). Each must parse to the generated calls,
and every chunking must stream the same content and the same per-call arguments.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolcall_corpus import compact, samples

from runtime_ext.formats import FORMAT_NAMES, CallStyle, ToolFormat, get_format
from runtime_ext.parsers import ParseResult, ToolCallParser, parse

SETTINGS = settings(
    max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def stream(fmt: ToolFormat, pieces: list[str]) -> tuple[str, dict[int, list[str]], ParseResult]:
    """Feed ``pieces``; return streamed content, per-call [name, arguments], and the result."""
    parser = ToolCallParser(fmt)
    events = [parser.feed(piece) for piece in pieces] + [parser.finish()]
    calls: dict[int, list[str]] = {}
    for event in events:
        for delta in event.calls:
            if delta.index not in calls:
                assert delta.index == len(calls), "calls are opened in order"
                assert delta.name is not None and delta.arguments == "", "the first delta carries the name"
                calls[delta.index] = [delta.name, ""]
            else:
                assert delta.name is None, "only the first delta carries the name"
                calls[delta.index][1] += delta.arguments
    return "".join(event.content for event in events), calls, parser.result()


def check_stream(fmt: ToolFormat, expected: ParseResult, pieces: list[str]) -> None:
    content, calls, result = stream(fmt, pieces)
    assert result == expected, pieces
    assert content == expected.content, pieces
    for call in expected.calls:
        assert calls[call.index] == [call.name, call.arguments], pieces
    extra = set(calls) - {call.index for call in expected.calls}
    assert extra <= ({len(expected.calls)} if expected.incomplete else set()), pieces


def chunks(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


JSON_FORMATS = [n for n in FORMAT_NAMES if get_format(n).style is not CallStyle.XML_PARAMS]
"""The XML formats type raw values by the tools' schemas: test_xml_tool_calls.py covers them."""


@pytest.mark.parametrize("name", JSON_FORMATS)
@SETTINGS
@given(data=st.data())
def test_parse_matches_generated_calls_and_every_chunking(name: str, data: st.DataObject) -> None:
    fmt = get_format(name)
    sample = data.draw(samples(fmt), label="sample")
    result = parse(fmt, sample.text)

    assert result.content == sample.content
    assert [(call.name, json.loads(call.arguments)) for call in result.calls] == sample.calls
    assert [call.arguments for call in result.calls] == [compact(obj) for _, obj in sample.calls]
    assert [call.index for call in result.calls] == list(range(len(result.calls)))
    assert (result.incomplete, result.incomplete_text) == (sample.incomplete, sample.incomplete_text)

    text = sample.text
    check_stream(fmt, result, list(text))
    if len(text) <= 80:
        splits = list(range(len(text) + 1))
    else:
        splits = data.draw(st.lists(st.integers(0, len(text)), min_size=1, max_size=8), label="splits")
    for at in splits:
        check_stream(fmt, result, [text[:at], text[at:]])
    check_stream(fmt, result, chunks(text, data.draw(st.lists(st.integers(0, len(text)), max_size=6))))

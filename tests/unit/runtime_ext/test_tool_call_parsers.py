"""Example tests of the documented parser decisions (unknown names, malformed and
incomplete calls, hold-back, non-canonical envelopes) across formats."""

from __future__ import annotations

import pytest

from runtime_ext.formats import FORMAT_NAMES, get_format, render_call
from runtime_ext.formats.tool_formats import DEEPSEEK_CALLS_BEGIN
from runtime_ext.parsers import ParsedToolCall, ParserFinishedError, ToolCallDelta, ToolCallParser, parse

PLAIN = ["", "  ", "Hello, world.\n", " a < b and [c] {d} ", "see <tool_ca", "[TOOL_CALLS", "x\n\n"]


@pytest.mark.parametrize("name", FORMAT_NAMES)
@pytest.mark.parametrize("text", PLAIN)
def test_output_without_calls_is_returned_unchanged(name: str, text: str) -> None:
    result = parse(name, text)
    assert (result.content, result.calls, result.incomplete) == (text, [], False)


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_unknown_tool_name_is_content_known_name_is_a_call(name: str) -> None:
    fmt = get_format(name)
    text = render_call(fmt, "rm_rf", '{"path": "/"}')
    assert parse(fmt, text, tool_names=["get_weather"]).calls == []
    assert parse(fmt, text, tool_names=["get_weather"]).content == text
    assert parse(fmt, text, tool_names=["rm_rf"]).calls == [ParsedToolCall(0, "rm_rf", '{"path":"/"}')]


def test_text_that_may_start_a_marker_is_held_back_until_decided() -> None:
    parser = ToolCallParser("qwen")
    assert parser.feed("Hi <tool_").content == "Hi"
    assert parser.feed("x").content == " <tool_x"
    assert parser.feed(" <tool_call>\n{").content == ""
    event = parser.feed('"name": "f", "arguments": {"a"')
    assert event.calls == (ToolCallDelta(0, "f", ""), ToolCallDelta(0, None, '{"a"'))
    assert parser.feed(": 1}}\n</tool_call>").calls == (ToolCallDelta(0, None, ":1}"),)
    assert parser.finish().content == ""
    assert parser.result().content == "Hi <tool_x"


def test_content_between_calls_and_indices() -> None:
    call = render_call(get_format("generic"), "f", "{}")
    result = parse("generic", f"a {call} b {call} c")
    assert result.content == "a b c"
    assert [c.index for c in result.calls] == [0, 1]


def test_cut_call_is_incomplete_and_its_deltas_use_the_next_index() -> None:
    text = 'Sure.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {"q": "ab'
    parser = ToolCallParser("qwen")
    deltas = [d for ev in (parser.feed(text), parser.finish()) for d in ev.calls]
    result = parser.result()
    assert result.calls == [ParsedToolCall(0, "f", "{}")] and result.incomplete
    assert result.incomplete_text == '<tool_call>\n{"name": "g", "arguments": {"q": "ab'
    assert ToolCallDelta(1, "g", "") in deltas and result.content == "Sure."


def test_marker_alone_at_the_end_is_an_incomplete_call() -> None:
    result = parse("qwen", "ok <tool_call>")
    assert (result.content, result.incomplete, result.incomplete_text) == ("ok", True, "<tool_call>")


def test_malformed_arguments_after_the_name_end_parsing_as_incomplete() -> None:
    text = 'a <tool_call>{"name": "f", "arguments": {"x": tru}}</tool_call> b'
    result = parse("generic", text)
    assert (result.content, result.calls, result.incomplete) == ("a", [], True)
    assert result.incomplete_text == text[2:]


def test_marker_not_followed_by_a_call_is_content() -> None:
    for text in [
        "<tool_call>hello</tool_call>",
        '<tool_call>{"no": "name"}</tool_call>',
        "<tool_call>{bad json}</tool_call>",
    ]:
        assert parse("qwen", text).content == text and parse("qwen", text).calls == []


@pytest.mark.parametrize(
    "body, arguments",
    [
        ('{"arguments": {"b": [1, 2]}, "name": "f"}', '{"b":[1,2]}'),
        ('{"name": "f", "arguments": "{\\"b\\": 1}"}', '{"b":1}'),
        ('{"name": "f"}', "{}"),
        ('{"id": 3, "name": "f", "parameters": {}}', "{}"),
        ('{"name": "f", "arguments": {"b": 1}, "extra": [1, {"c": "}"}]}', '{"b":1}'),
    ],
)
def test_non_canonical_envelopes_after_a_marker(body: str, arguments: str) -> None:
    result = parse("qwen", f"<tool_call>\n{body}\n</tool_call>")
    assert result.calls == [ParsedToolCall(0, "f", arguments)] and result.content == ""


def test_arguments_are_canonical_compact_json() -> None:
    text = '<tool_call>{"name": "f", "arguments": { "a" : 1.50 , "b": "\\u00e9\\/\\ud83d\\ude00", "c": 1E2, "d": -0 }}</tool_call>'
    assert parse("generic", text).calls[0].arguments == '{"a":1.5,"b":"é/😀","c":100.0,"d":0}'


def test_bare_json_that_is_no_call_streams_as_content_at_once() -> None:
    parser = ToolCallParser("qwen")
    assert parser.feed('{"answer": ').content == '{"answer":'
    assert parser.feed("42}").content == " 42}"
    parser.finish()
    assert parser.result().calls == []


def test_bare_qwen_calls_then_text() -> None:
    result = parse("qwen", '{"name": "f", "arguments": {"a": 1}}\n{"name": "g", "arguments": {}}\nDone.')
    assert [(c.name, c.arguments) for c in result.calls] == [("f", '{"a":1}'), ("g", "{}")]
    assert result.content == "\nDone."


def test_llama3_python_tag_with_python_code_is_content() -> None:
    text = '<|python_tag|>brave_search.call(query="x")'
    assert parse("llama3", text).content == text


def test_llama3_tagged_calls_after_text() -> None:
    result = parse(
        "llama3", 'Let me check. <|python_tag|>{"name": "f", "arguments": {"a": 1}}; {"name": "g", "parameters": {}}'
    )
    assert result.content == "Let me check." and [c.name for c in result.calls] == ["f", "g"]


def test_mistral_empty_array_and_unknown_element() -> None:
    assert parse("mistral", "[TOOL_CALLS] []") == parse("mistral", "[TOOL_CALLS] []")
    assert parse("mistral", "[TOOL_CALLS] []").calls == []
    text = '[TOOL_CALLS] [{"name": "x", "arguments": {}}, {"name": "f", "arguments": {"a": 1}}]'
    result = parse("mistral", text, tool_names=["f"])
    assert result.calls == [ParsedToolCall(0, "f", '{"a":1}')]
    assert result.content == '[TOOL_CALLS] [{"name": "x", "arguments": {}}'


def test_deepseek_unknown_block_is_content_and_next_call_parses() -> None:
    fmt = get_format("deepseek_v3")
    block = fmt.call_start + "x" + fmt.name_end + '{"a": "```"}' + fmt.arguments_end + fmt.call_end
    good = fmt.call_start + "f" + fmt.name_end + "{}" + fmt.arguments_end + fmt.call_end
    result = parse(fmt, DEEPSEEK_CALLS_BEGIN + block + "\n" + good + fmt.section_end, tool_names=["f"])
    assert result.calls == [ParsedToolCall(0, "f", "{}")]
    assert result.content == DEEPSEEK_CALLS_BEGIN + block


@pytest.mark.parametrize("text", ["[1, 2]", "[foo(1)]", "[foo(a=b)]", "[] x", "[unknown(a=1)]", "[f(a=1"])
def test_pythonic_lists_that_are_no_calls(text: str) -> None:
    result = parse("pythonic", text, tool_names=["f"])
    assert result.calls == []
    assert result.content == text or (result.incomplete and result.incomplete_text == text)


def test_pythonic_values_become_json() -> None:
    result = parse("pythonic", "[f(a=(1, 2), b={'k': None}, c=True, d=-1.5), g.h()]")
    assert [(c.name, c.arguments) for c in result.calls] == [
        ("f", '{"a":[1,2],"b":{"k":null},"c":true,"d":-1.5}'),
        ("g.h", "{}"),
    ]


def test_parser_lifecycle_errors() -> None:
    parser = ToolCallParser("qwen")
    with pytest.raises(ParserFinishedError):
        parser.result()
    parser.finish()
    with pytest.raises(ParserFinishedError):
        parser.feed("x")
    with pytest.raises(ParserFinishedError):
        parser.finish()

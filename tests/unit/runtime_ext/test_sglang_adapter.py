"""Our parsers inside SGLang's FunctionCallParser (imports SGLang; no engine)."""

from __future__ import annotations

import pytest

from runtime_ext.formats import FORMAT_NAMES, CallStyle, get_format, render_calls
from runtime_ext.parsers.sglang_adapter import detector_class, parser_name, register_tool_parsers

protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
from sglang.srt.function_call import parser_names  # noqa: E402
from sglang.srt.function_call.function_call_parser import FunctionCallParser  # noqa: E402

TOOLS = [
    protocol.Tool(type="function", function=protocol.Function(name="noop")),
    protocol.Tool(
        type="function",
        function=protocol.Function(
            name="get_weather",
            parameters={"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
        ),
    ),
]
TEXT = 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n<tool_call>{"name": "noop", "arguments": {}}</tool_call>'


@pytest.fixture(scope="module", autouse=True)
def registered() -> tuple[str, ...]:
    return register_tool_parsers()


def test_registration_is_complete_and_idempotent(registered: tuple[str, ...]) -> None:
    assert registered == tuple(f"structserve_{name}" for name in FORMAT_NAMES)
    assert register_tool_parsers() == registered
    for name in FORMAT_NAMES:
        assert FunctionCallParser.ToolCallParserEnum[parser_name(name)] is detector_class(name)
        assert parser_names.TOOL_CALL_PARSER_NAMES.count(parser_name(name)) == 1
    assert FunctionCallParser.ToolCallParserEnum["qwen"].__module__.startswith("sglang."), "built-ins untouched"


def test_parse_non_stream_returns_our_calls() -> None:
    normal, calls = FunctionCallParser(TOOLS, "structserve_generic").parse_non_stream(TEXT)
    assert normal == "Checking."
    assert [(c.tool_index, c.name, c.parameters) for c in calls] == [
        (1, "get_weather", '{"city":"Paris"}'),
        (0, "noop", "{}"),
    ]


def test_streaming_through_sglang_matches_and_leaves_nothing_to_resend() -> None:
    parser = FunctionCallParser(TOOLS, "structserve_generic")
    results = [parser.parse_stream_chunk(ch) for ch in TEXT] + [parser.parse_stream_end()]
    assert "".join(normal for normal, _ in results) == "Checking."
    calls: dict[int, list[str]] = {}
    for _, items in results:
        for item in items:
            calls.setdefault(item.tool_index, ["", ""])
            calls[item.tool_index][0] += item.name or ""
            calls[item.tool_index][1] += item.parameters
    assert calls == {0: ["get_weather", '{"city":"Paris"}'], 1: ["noop", "{}"]}
    detector = parser.detector
    assert detector.streamed_args_for_tool == ['{"city":"Paris"}', "{}"]
    assert [c["arguments"] for c in detector.prev_tool_call_arr] == detector.streamed_args_for_tool


JSON_FORMATS = [n for n in FORMAT_NAMES if get_format(n).style not in (CallStyle.PYTHONIC, CallStyle.XML_PARAMS)]
XML_FORMATS = [n for n in FORMAT_NAMES if get_format(n).style is CallStyle.XML_PARAMS]


@pytest.mark.parametrize("name", XML_FORMATS)
def test_xml_formats_type_values_by_the_tools_schemas_and_offer_no_legacy_tag(name: str) -> None:
    text = render_calls(get_format(name), [("get_weather", '{"city": "7", "days": 3}')])
    parser = FunctionCallParser(TOOLS, parser_name(name))
    assert [(c.name, c.parameters) for c in parser.parse_non_stream(text)[1]] == [
        ("get_weather", '{"city":"7","days":3}')
    ]
    streamed = FunctionCallParser(TOOLS, parser_name(name))
    items = [item for ch in text for item in streamed.parse_stream_chunk(ch)[1]]
    assert "".join(item.parameters or "" for item in items) == '{"city":"7","days":3}'
    assert not parser.detector.supports_structural_tag()


@pytest.mark.parametrize("name", JSON_FORMATS)
def test_every_format_round_trips_and_offers_a_structural_tag(name: str) -> None:
    text = render_calls(get_format(name), [("get_weather", '{"city": "Rome"}')])
    parser = FunctionCallParser(TOOLS, parser_name(name))
    assert parser.has_tool_call(text)
    assert [(c.name, c.parameters) for c in parser.parse_non_stream(text)[1]] == [("get_weather", '{"city":"Rome"}')]
    kind, tag = parser.get_structure_constraint("required")
    assert kind == "structural_tag" and tag.at_least_one
    structure = tag.structures[1]
    assert structure.begin.startswith(tag.triggers[0])
    forced = structure.begin + '{"city": "Rome"}' + structure.end
    assert [(c.name, c.parameters) for c in parser.parse_non_stream(forced)[1]] == [("get_weather", '{"city":"Rome"}')]


def test_pythonic_round_trips_without_structural_tag() -> None:
    parser = FunctionCallParser(TOOLS, "structserve_pythonic")
    assert parser.parse_non_stream("[get_weather(city='Rome')]")[1][0].parameters == '{"city":"Rome"}'
    assert not parser.detector.supports_structural_tag()

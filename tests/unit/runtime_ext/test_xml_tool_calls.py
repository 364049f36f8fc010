"""The XML tool-call formats (qwen3_coder, glm45): values typed by the tools' schemas,
streamed arguments adding up to the final JSON, no marker in content or arguments; and
the model family (these, deepseek_v31) chosen from config.json / the chat template."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime_ext.formats import get_format, render_calls, select_format
from runtime_ext.formats.families import family_by_template
from runtime_ext.parsers import ToolCallParser, parse

SCHEMAS: dict[str, Any] = {
    "f": {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "b": {"type": "boolean"},
            "z": {"type": ["integer", "null"]},
            "o": {"type": "object"},
            "l": {"type": "array", "items": {"type": "string"}},
            "s": {"type": "string"},
            "e": {"enum": ["null", "5"]},
        },
    },
    "g": None,
}
ARGS = {"n": 5, "x": 1.5, "b": False, "z": None, "o": {"k": "</parameter></arg_value>"}, "l": ["a"], "s": "null"}
FORMATS = ["qwen3_coder", "glm45"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_arrive_as_their_schema_types(fmt: str) -> None:
    text = "Let me. " + render_calls(get_format(fmt), [("f", json.dumps({**ARGS, "e": "5"})), ("g", "{}")])
    result = parse(fmt, text, ["f", "g"], SCHEMAS)
    assert result.content == "Let me." and not result.incomplete
    assert [(c.name, json.loads(c.arguments)) for c in result.calls] == [("f", {**ARGS, "e": "5"}), ("g", {})]


@pytest.mark.parametrize("fmt", FORMATS)
def test_without_a_schema_values_are_strings(fmt: str) -> None:
    text = render_calls(get_format(fmt), [("g", '{"n": 5, "s": "a b"}')])
    assert json.loads(parse(fmt, text).calls[0].arguments) == {"n": "5", "s": "a b"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_typed_value_that_is_not_json_stays_its_text(fmt: str) -> None:
    text = render_calls(get_format(fmt), [("f", '{"n": "five", "x": "NaN"}')])
    assert json.loads(parse(fmt, text, None, SCHEMAS).calls[0].arguments) == {"n": "five", "x": "NaN"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_arguments_concatenate_to_the_final_json(fmt: str) -> None:
    text = render_calls(get_format(fmt), [("f", json.dumps(ARGS)), ("g", "{}")]) + "\n"
    parser = ToolCallParser(fmt, ["f", "g"], SCHEMAS)
    events = [parser.feed(ch) for ch in text] + [parser.finish()]
    streamed: dict[int, list[str]] = {}
    for delta in (d for e in events for d in e.calls):
        streamed.setdefault(delta.index, ["", ""])
        streamed[delta.index][0] += delta.name or ""
        streamed[delta.index][1] += delta.arguments
    assert "".join(e.content for e in events) == ""
    final = parser.result().calls
    assert streamed == {c.index: [c.name, c.arguments] for c in final}
    assert json.loads(final[0].arguments) == ARGS
    fragments = [d.arguments for e in events for d in e.calls if d.index == 0 and d.arguments]
    assert len(fragments) == len(ARGS) + 1  # one per argument as its value closes, then "}"


def test_the_official_template_spellings_parse() -> None:
    """The spellings of SGLang's detector docstrings (qwen3_coder_detector.py,
    glm4_moe_detector.py, glm47_moe_detector.py): newlines optional between markers."""
    qwen = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nBeijing\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    glm45 = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>北京</arg_value>\n</tool_call>"
    glm47 = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>北京</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
    schemas = {"get_weather": {"properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}
    assert parse("qwen3_coder", qwen, None, schemas).calls[0].arguments == '{"city":"Beijing","days":3}'
    assert parse("glm45", glm45, None, schemas).calls[0].arguments == '{"city":"北京"}'
    assert parse("glm47", glm47, None, schemas).calls[0].arguments == '{"city":"北京","days":3}'


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_call_broken_after_its_name_is_incomplete_and_nothing_leaks(fmt: str) -> None:
    f = get_format(fmt)
    text = f"ok {f.call_start}f{f.name_end}<oops>{f.call_end} after"
    result = parse(fmt, text, ["f"], SCHEMAS)
    assert (result.content, result.calls, result.incomplete) == ("ok", [], True)
    assert result.incomplete_text == text[3:]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unknown_tool_is_content_and_the_next_call_still_parses(fmt: str) -> None:
    text = render_calls(get_format(fmt), [("rm", '{"p": "/"}'), ("g", "{}")])
    result = parse(fmt, text, ["g"], SCHEMAS)
    assert [c.name for c in result.calls] == ["g"] and result.content == text.split("\n<tool_call>")[0]


FAMILY_CASES = [
    ("qwen3_moe", "{{ '<tool_call>\\n<function=' }}{{ '<parameter=' }} tools", "qwen3_coder"),
    ("qwen3_moe", "<tool_call> tools", "qwen"),
    ("glm4_moe", "<tool_call>{{ name }}<arg_key>k</arg_key><arg_value>", "glm45"),
    ("glm4_moe", None, "glm45"),
    ("qwen3_5_moe", None, "qwen3_coder"),
    (  # how llama.cpp's copy of the official template (deepseek-ai-DeepSeek-V3.1.jinja) writes a call
        "deepseek_v3",
        "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + "
        "tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}",
        "deepseek_v31",
    ),
    ("deepseek_v3", "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json'", "deepseek_v3"),
]


@pytest.mark.parametrize("model_type, template, expected", FAMILY_CASES)
def test_the_family_is_chosen_from_the_template_markers_then_the_model_type(
    model_type: str, template: str | None, expected: str
) -> None:
    assert select_format("auto", model_type, True, template).name == expected
    assert select_format("qwen", model_type, True, template).name == "qwen"  # tool_format config wins
    assert select_format("auto", model_type, False, template).name == "generic"


def test_template_markers_need_all_of_them() -> None:
    assert family_by_template("<function= only") is None
    assert family_by_template({"default": "<function=<parameter="}) is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_number_too_large_for_a_float_keeps_its_digits_as_in_the_json_formats(fmt: str) -> None:
    f = get_format(fmt)
    value = f"{f.key_start}x{f.key_end}-0.6e70223{f.value_end}{f.key_start}o{f.key_end}" + '{"k": 1e999}'
    text = f"{f.call_start}f{f.name_end}{value}{f.value_end}{f.call_end}"
    assert parse(fmt, text, None, SCHEMAS).calls[0].arguments == '{"x":-0.6e70223,"o":{"k":1e999}}'

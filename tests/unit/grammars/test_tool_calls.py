"""grammars.tool_calls without xgrammar: inputs, errors, and the shape SGLang receives."""

from __future__ import annotations

import json

import pytest

from grammars.tool_calls import (
    EMPTY_PARAMETERS,
    Constraint,
    ToolConstraintError,
    ToolSpec,
    UnsupportedToolFormatError,
    tool_call_constraint,
)
from runtime_ext.formats import get_format

WEATHER = ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}, strict=True)
NOOP = ToolSpec("noop")


def decoded(constraint: Constraint) -> dict:
    assert constraint.kind == "structural_tag"
    value = json.loads(constraint.value)
    assert value["type"] == "structural_tag" and "structures" not in value, "the new xgrammar format, not legacy"
    return value["format"]


def test_auto_tagged_is_triggered_by_the_call_marker() -> None:
    fmt = decoded(tool_call_constraint("qwen", [WEATHER, NOOP], "auto"))
    assert fmt["type"] == "triggered_tags" and fmt["triggers"] == ["<tool_call>"]
    assert [tag["begin"] for tag in fmt["tags"]] == [
        '<tool_call>\n{"name": "get_weather", "arguments": ',
        '<tool_call>\n{"name": "noop", "arguments": ',
    ]
    assert all(tag["end"] == "}\n</tool_call>" for tag in fmt["tags"])
    assert fmt["stop_after_first"] is False


def test_required_and_named_have_no_free_text() -> None:
    required = decoded(tool_call_constraint("generic", [WEATHER, NOOP], "required", parallel=False))
    assert required["type"] == "tags_with_separator" and required["at_least_one"] and required["stop_after_first"]
    named = decoded(tool_call_constraint("generic", [WEATHER, NOOP], "named", named="noop"))
    assert [tag["begin"] for tag in named["tags"]] == ['<tool_call>{"name": "noop", "arguments": ']
    assert named["tags"][0]["content"]["json_schema"] == dict(EMPTY_PARAMETERS)


def test_arguments_use_the_schema_or_the_injected_grammar() -> None:
    plain = decoded(tool_call_constraint("mistral", [WEATHER], "required"))
    content = plain["content"]["tags"][0]["content"]
    assert content == {"type": "json_schema", "json_schema": WEATHER.parameters, "max_whitespace_cnt": 1}
    seen = []
    injected = decoded(
        tool_call_constraint("mistral", [WEATHER], "required", json_grammar=lambda s: seen.append(s) or "root ::= \"{}\"")
    )
    assert injected["content"]["tags"][0]["content"] == {"type": "grammar", "grammar": 'root ::= "{}"'}
    assert seen == [WEATHER.parameters]


def test_constraint_is_deterministic() -> None:
    make = lambda: tool_call_constraint("llama3", [WEATHER, NOOP], "auto", parallel=False)  # noqa: E731
    assert make() == make()


@pytest.mark.parametrize(
    "tools, mode, named",
    [
        ([], "auto", None),
        ([WEATHER, WEATHER], "auto", None),
        ([WEATHER], "named", None),
        ([WEATHER], "named", "nope"),
        ([WEATHER], "required", "get_weather"),
        ([WEATHER], "sometimes", None),
    ],
)
def test_bad_requests_raise(tools: list[ToolSpec], mode: str, named: str | None) -> None:
    with pytest.raises(ToolConstraintError):
        tool_call_constraint("qwen", tools, mode, named)  # type: ignore[arg-type]


def test_pythonic_has_no_grammar() -> None:
    with pytest.raises(UnsupportedToolFormatError, match="pythonic.*required") as info:
        tool_call_constraint(get_format("pythonic"), [WEATHER], "required")
    assert isinstance(info.value, NotImplementedError)
    assert (info.value.format_name, info.value.mode) == ("pythonic", "required")

"""grammars.tool_calls.constraint without xgrammar: inputs, errors, and the shape SGLang receives."""

from __future__ import annotations

import json

import pytest

from grammars.tool_calls import (
    EMPTY_PARAMETERS,
    Constraint,
    ToolConstraintError,
    ToolSpec,
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


def ends_in_bounded_whitespace(fmt: dict) -> dict:
    """The whole output is ``[body, whitespace{0,2}]``; returns the body."""
    assert fmt["type"] == "sequence" and fmt["elements"][1] == {"type": "regex", "pattern": "[ \\t\\r\\n]{0,2}"}
    return fmt["elements"][0]


def test_auto_tagged_is_triggered_by_the_call_marker_and_calls_end_the_output() -> None:
    fmt = ends_in_bounded_whitespace(decoded(tool_call_constraint("qwen", [WEATHER, NOOP], "auto")))
    assert fmt["type"] == "triggered_tags" and fmt["triggers"] == ["<tool_call>"] and fmt["stop_after_first"]
    (group,) = fmt["tags"]
    assert (group["begin"], group["end"]) == ("<tool_call>", "</tool_call>")
    first, more = group["content"]["elements"]
    assert [tag["begin"] for tag in first["elements"]] == [
        '\n{"name": "get_weather", "arguments": ',
        '\n{"name": "noop", "arguments": ',
    ]
    assert all(tag["end"] == "}\n" for tag in first["elements"])
    assert more["type"] == "star"


def test_required_and_named_have_no_free_text() -> None:
    required = ends_in_bounded_whitespace(
        decoded(tool_call_constraint("generic", [WEATHER, NOOP], "required", parallel=False))
    )
    assert required["type"] == "or" and [t["type"] for t in required["elements"]] == ["tag", "tag"]
    named = ends_in_bounded_whitespace(decoded(tool_call_constraint("generic", [WEATHER, NOOP], "named", named="noop")))
    call, more = named["elements"]
    assert call["begin"] == '<tool_call>{"name": "noop", "arguments": '
    assert call["content"]["json_schema"] == dict(EMPTY_PARAMETERS)
    assert more == {
        "type": "star",
        "content": {"type": "sequence", "elements": [{"type": "regex", "pattern": "[ \\t\\r\\n]{0,2}"}, call]},
    }


def test_arguments_use_the_schema_or_the_injected_grammar() -> None:
    plain = ends_in_bounded_whitespace(decoded(tool_call_constraint("mistral", [WEATHER], "required")))
    content = plain["content"]["elements"][0]["content"]
    assert content == {"type": "json_schema", "json_schema": WEATHER.parameters, "max_whitespace_cnt": 1}
    seen = []
    injected = ends_in_bounded_whitespace(
        decoded(
            tool_call_constraint(
                "mistral", [WEATHER], "required", json_grammar=lambda s: seen.append(s) or 'root ::= "{}"'
            )
        )
    )
    assert injected["content"]["elements"][0]["content"] == {"type": "grammar", "grammar": 'root ::= "{}"'}
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


def test_pythonic_calls_are_a_list_with_a_grammar_per_tool() -> None:
    fmt = ends_in_bounded_whitespace(decoded(tool_call_constraint(get_format("pythonic"), [WEATHER], "required")))
    assert (fmt["begin"], fmt["end"]) == ("[", "]")
    call = fmt["content"]["elements"][0]
    assert (call["begin"], call["end"], call["content"]["type"]) == ("get_weather(", ")", "grammar")
    assert call["content"]["grammar"].startswith("root ::= ")

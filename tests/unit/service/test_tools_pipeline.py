"""Tools through the pure pipeline stages: validate, constraints, prompt inlining, output."""

from __future__ import annotations

import json

import pytest

from grammars.errors import UnsupportedKeywordError
from grammars.tool_calls import PythonicSchemaError, XmlSchemaError
from runtime_ext.formats import ToolFormatSelectionError, get_format, render_calls, select_format
from runtime_ext.formats.spec import UnknownFormatError
from service.errors import InvalidRequestError
from service.pipeline.choice import ChoiceOutput
from service.pipeline.constraints import build_constraint
from service.pipeline.prompt import inline_tools
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ModelFormats, ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=100, max_n=4, default_max_tokens=None)
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
QWEN = get_format("qwen")


def fn(name, parameters=None, **extra):
    function = {"name": name, **extra}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def validated(fmt=QWEN, **kw):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    return validate_request(ChatCompletionRequest.model_validate(body), LIMITS, ModelFormats(tools=fmt))


def structure(constraint):
    """The output's structure before the bounded whitespace every tool grammar ends with."""
    assert constraint.kind == "structural_tag"
    whole = json.loads(constraint.value)["format"]
    assert whole["type"] == "sequence" and whole["elements"][1]["type"] == "regex"
    return whole["elements"][0]


def tag_begins(node):
    """Every tag's begin string in the structure, in order."""
    if isinstance(node, list):
        return [b for item in node for b in tag_begins(item)]
    if not isinstance(node, dict):
        return []
    own = [node["begin"]] if node.get("type") == "tag" else []
    return own + tag_begins([v for k, v in node.items() if k != "begin"])


def test_defaults_auto_parallel_all_tools_allowed():
    tools = validated(tools=[fn("a"), fn("b", WEATHER_PARAMS)]).tools
    assert tools.mode == "auto" and tools.parallel is True and tools.allowed == ("a", "b")
    assert tools.schema_of("b") == WEATHER_PARAMS and tools.schema_of("a") is None


def test_named_and_allowed_tools_narrow_what_is_callable():
    named = validated(tools=[fn("a"), fn("b")], tool_choice={"type": "function", "function": {"name": "b"}}).tools
    assert (named.mode, named.allowed) == ("named", ("b",))
    allowed = validated(
        tools=[fn("a"), fn("b"), fn("c")],
        tool_choice={
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "required",
                "tools": [{"type": "function", "function": {"name": n}} for n in ("c", "a", "c")],
            },
        },
    ).tools
    assert (allowed.mode, allowed.allowed) == ("required", ("c", "a"))
    assert [t.name for t in allowed.tools] == ["a", "b", "c"]  # every tool is still shown


@pytest.mark.parametrize(
    "kw, param",
    [
        ({"tools": [fn("a"), fn("a")]}, "tools.1.function.name"),
        ({"tools": []}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"parallel_tool_calls": True}, "parallel_tool_calls"),
        ({"tools": [fn("a", {"type": "string"})]}, "tools.0.function.parameters"),
        (
            {"tools": [fn("a")], "tool_choice": {"type": "function", "function": {"name": "zz"}}},
            "tool_choice.function.name",
        ),
    ],
)
def test_bad_tool_requests_name_the_field(kw, param):
    with pytest.raises(InvalidRequestError) as err:
        validated(**kw)
    assert err.value.param == param


def test_conversation_with_calls_and_results():
    msgs = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    v = validated(messages=msgs, tools=[fn("w", WEATHER_PARAMS)])
    assert v.messages[1].content == "" and v.messages[1].tool_calls[0].name == "w"
    with pytest.raises(InvalidRequestError) as err:
        validated(messages=[msgs[0], {**msgs[2], "tool_call_id": "c2"}])
    assert err.value.param == "messages.1.tool_call_id"


def test_required_constraint_is_calls_only_for_the_allowed_tools():
    v = validated(tools=[fn("a"), fn("w", WEATHER_PARAMS)], tool_choice="required", parallel_tool_calls=False)
    s = structure(build_constraint(v, False))
    assert s["type"] == "or"  # one call of either tool, nothing repeated
    assert tag_begins(s) == ['<tool_call>\n{"name": "a", "arguments": ', '<tool_call>\n{"name": "w", "arguments": ']
    named = build_constraint(
        validated(tools=[fn("a"), fn("w")], tool_choice={"type": "function", "function": {"name": "w"}}), False
    )
    assert set(tag_begins(structure(named))) == {'<tool_call>\n{"name": "w", "arguments": '}


def test_auto_is_triggered_and_none_is_free_text():
    auto = structure(build_constraint(validated(tools=[fn("a")]), False))
    assert auto["type"] == "triggered_tags" and auto["triggers"] == ["<tool_call>"]
    assert build_constraint(validated(tools=[fn("a")], tool_choice="none"), False) is None


def test_auto_with_response_format_is_calls_or_the_json():
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": WEATHER_PARAMS}}
    c = build_constraint(validated(tools=[fn("a")], response_format=fmt), False)
    s = structure(c)
    assert s["type"] == "or" and s["elements"][1]["json_schema"] == WEATHER_PARAMS
    assert c.validate_schema == WEATHER_PARAMS and c.parts[0][0] == "response_format.json_schema.schema"


def test_tool_parameters_follow_the_keyword_policy():
    params = {"type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}}
    v = validated(tools=[fn("ok"), fn("f", params)], tool_choice="required")
    with pytest.raises(UnsupportedKeywordError) as err:
        build_constraint(v, False)
    assert err.value.param == "tools.1.function.parameters"
    loose = build_constraint(validated(tools=[fn("ok"), fn("f", params)], allow_schema_loosening=True), False)
    assert loose.loosened == ("f: uniqueItems at /properties/t",)
    assert [p for p, _ in loose.parts] == ["tools.1.function.parameters"]


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "a"}}])
def test_pythonic_is_grammar_enforced_in_every_mode(choice):
    pythonic = get_format("pythonic")
    constraint = build_constraint(
        validated(pythonic, tools=[fn("a"), fn("b", WEATHER_PARAMS)], tool_choice=choice), False
    )
    assert constraint.kind == "structural_tag" and '"begin":"a("' in constraint.value


def test_pythonic_schema_outside_the_subset_is_a_400_naming_the_tool_field():
    pythonic = get_format("pythonic")
    params = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}
    with pytest.raises(PythonicSchemaError) as err:
        build_constraint(validated(pythonic, tools=[fn("a"), fn("b", params)]), False)
    assert err.value.param == "tools.1.function.parameters" and err.value.pointer == "/properties/n"
    assert "`minimum`" in err.value.message
    with pytest.raises(PythonicSchemaError) as err:
        build_constraint(validated(pythonic, tools=[fn("get-weather")], tool_choice="required"), False)
    assert err.value.param == "tools.0.function.name"


@pytest.mark.parametrize("name", ["qwen3_coder", "glm45"])
def test_xml_schema_the_format_cannot_carry_is_a_400_naming_the_tool_field(name):
    params = {"type": "object", "properties": {"n": {"type": ["string", "integer"]}}}
    with pytest.raises(XmlSchemaError) as err:
        build_constraint(validated(get_format(name), tools=[fn("a"), fn("b", params)]), False)
    assert err.value.param == "tools.1.function.parameters" and err.value.pointer == "/properties/n"
    assert err.value.code == "unsupported_xml_tool_schema" and "may be a string or another type" in err.value.message


@pytest.mark.parametrize("name", ["qwen3_coder", "glm45"])
def test_xml_calls_reach_the_client_typed_by_the_request_schemas(name):
    params = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    v = validated(get_format(name), tools=[fn("w", params)], tool_choice="required")
    out = ChoiceOutput(build_constraint(v, False), v.tools)
    text = render_calls(get_format(name), [("w", '{"city": "7", "days": 7}')])
    deltas = [d for ch in text for d in out.feed(ch).tool_calls]
    _, result = out.finish("stop")
    assert [c.function.arguments for c in result.tool_calls] == ['{"city":"7","days":7}']
    assert "".join(d.function.arguments for d in deltas) == '{"city":"7","days":7}'
    assert result.content in ("", None) and result.validation.valid is True


@pytest.mark.parametrize("name", ["pythonic", "qwen3_coder", "glm45"])
def test_a_framed_custom_tool_needs_a_json_call_format(name):
    custom = {"type": "custom", "custom": {"name": "patch"}}
    with pytest.raises(InvalidRequestError) as err:
        validated(get_format(name), tools=[custom], tool_choice="auto")
    assert err.value.param == "tool_choice" and "only in a JSON tool-call format" in str(err.value)
    assert validated(get_format(name), tools=[custom], tool_choice={"type": "custom", "custom": {"name": "patch"}})


def test_inline_tools_for_templates_without_a_tools_section():
    generic = get_format("generic")
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    v = validated(messages=msgs, tools=[fn("w", WEATHER_PARAMS, description="Weather now")], tool_choice="required")
    out = inline_tools(v.messages, v.tools, generic)
    assert [m.role for m in out] == ["system", "user", "assistant", "user"]
    assert out[0].content.startswith("Be brief.\n\nYou can call these functions:\n- w: Weather now")
    assert "You must call at least one function" in out[0].content
    assert out[2].content == "Checking.\n" + render_calls(generic, [("w", '{"city": "Oslo"}')])
    assert out[3].content == "Result of w (call c1):\nsunny"
    assert all(not m.tool_calls for m in out)


def test_select_format():
    assert select_format("auto", "llama", template_renders_tools=False).name == "generic"
    assert select_format("auto", "qwen3", template_renders_tools=True).name == "qwen"
    assert select_format("hermes", None, template_renders_tools=False).name == "qwen"
    with pytest.raises(ToolFormatSelectionError, match="tool_format"):
        select_format("auto", "brand_new_arch", template_renders_tools=True)
    with pytest.raises(UnknownFormatError, match="valid formats"):
        select_format("qwen9", "qwen3", template_renders_tools=True)


def _output(tool_choice="auto", **kw):
    v = validated(tools=[fn("w", WEATHER_PARAMS)], tool_choice=tool_choice, **kw)
    return ChoiceOutput(build_constraint(v, False), v.tools)


TEXT = 'Let me check.\n<tool_call>\n{"name": "w", "arguments": {"city": "Oslo"}}\n</tool_call>'


def test_output_calls_content_and_finish_reason_same_for_any_chunking():
    whole = _output()
    whole.feed(TEXT)
    _, result = whole.finish("stop")
    assert result.finish_reason == "tool_calls" and result.content == "Let me check."
    assert [(c.function.name, c.function.arguments) for c in result.tool_calls] == [("w", '{"city":"Oslo"}')]
    assert result.tool_calls[0].id.startswith("call_") and len(result.tool_calls[0].id) == 29
    assert result.validation.valid is True
    chunked = _output()
    deltas = [d for ch in TEXT for d in chunked.feed(ch).tool_calls]
    _, again = chunked.finish("stop")
    assert deltas[0].id == again.tool_calls[0].id and deltas[0].function.name == "w"
    assert "".join(d.function.arguments for d in deltas) == '{"city":"Oslo"}'
    assert again.content == result.content and again.finish_reason == "tool_calls"


def test_output_truncated_call_and_invalid_arguments_are_reported():
    cut = _output()
    cut.feed(TEXT[:-22])
    _, result = cut.finish("length")
    assert result.finish_reason == "length" and result.tool_calls[0].function.arguments == '{"city":'
    assert result.validation.valid is False and "truncated" in result.validation.error
    bad = _output()
    bad.feed('<tool_call>\n{"name": "w", "arguments": {"town": "Oslo"}}\n</tool_call>')
    _, result = bad.finish("stop")
    assert result.validation.valid is False and "'city' is a required property" in result.validation.error
    assert result.content is None


def test_tool_choice_none_leaves_the_text_alone():
    out = _output(tool_choice="none")
    assert out.feed(TEXT).content == TEXT
    _, result = out.finish("stop")
    assert result.content == TEXT and result.tool_calls is None and result.finish_reason == "stop"


def test_a_server_without_a_tool_format_refuses_tools():
    from service.errors import UnsupportedParameterError

    with pytest.raises(UnsupportedParameterError) as err:
        validated(fmt=None, tools=[fn("a")])
    assert err.value.param == "tools" and err.value.status == 400


def test_kimi_call_ids_are_the_call_text_counted_over_the_conversation():
    """Kimi-K2's template renders a call's id into the history as ``functions.NAME:IDX``: the
    ids continue the conversation's count (two calls before this turn: 2, 3), as SGLang names them."""
    kimi = get_format("kimi_k2")
    earlier = [
        {"id": f"functions.w:{i}", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}}
        for i in range(2)
    ]
    msgs = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": earlier},
        *({"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in earlier),
    ]
    v = validated(kimi, messages=msgs, tools=[fn("w", WEATHER_PARAMS)], tool_choice="required")
    out = ChoiceOutput(build_constraint(v, False), v.tools)
    out.feed(render_calls(kimi, [("w", '{"city": "Rome"}'), ("w", '{"city": "Oslo"}')]))
    _, result = out.finish("stop")
    assert [c.id for c in result.tool_calls] == ["functions.w:2", "functions.w:3"]
    assert _output().tools.format.make_call_id("w", 0).startswith("call_")

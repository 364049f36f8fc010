"""Responses -> chat conversion (pure: no engine): the request becomes the chat request the
pipeline runs, and its errors map back to Responses paths (checked through the real validate and
constraints stages). The way back (a completion or a chunk stream -> the same Response) is
test_responses_build.py."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletionCustomToolParam, ChatCompletionMessageCustomToolCallParam
from pydantic import TypeAdapter

from grammars.errors import GrammarError
from runtime_ext.formats import get_format
from runtime_ext.formats.reasoning_formats import QWEN3
from service.errors import InvalidRequestError, ServiceError, UnsupportedParameterError
from service.fronts.base import Origin
from service.fronts.responses import (
    ResponseBuilder,
    ResponsesParamMap,
    to_chat_request,
)
from service.fronts.responses.custom_tools import custom_call, custom_tool
from service.pipeline.constraints import build_constraint
from service.pipeline.validate import validate_request
from service.protocol.responses import CustomTool, CustomToolCallItem, ResponsesRequest
from service.types.serving import ModelFormats, ReasoningPolicy, ReasoningSetup, ServingLimits
from tests.unit.service.responses_cases import (
    TOOL_CALL_A,
    USER,
    WEATHER,
    chat_completion,
    request,
)

TIME = {"type": "function", "name": "get_time"}


def chat(**kw) -> dict:
    """The converted chat request, as the JSON the chat route would have received."""
    converted, _ = to_chat_request(request(**kw))
    return converted.model_dump(exclude_unset=True, by_alias=True)


def call(call_id, name="get_weather", arguments='{"city": "Paris"}'):
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id, text="sunny"):
    return {"type": "function_call_output", "call_id": call_id, "output": text}


# --- the request -------------------------------------------------------------------------


def test_instructions_lead_and_a_string_input_is_one_user_message():
    converted, _ = to_chat_request(
        ResponsesRequest.model_validate({"model": "m", "input": "hi", "instructions": "be brief"})
    )
    assert [(m.role, m.content) for m in converted.messages] == [("system", "be brief"), ("user", "hi")]
    assert not converted.stream and converted.stream_options is None


def test_fields_map_to_their_chat_names():
    out = chat(
        max_output_tokens=64,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        user="u",
        stream=True,
        text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}},
        reasoning={"effort": "low", "max_tokens": 100, "summary": "auto"},
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    assert out["max_completion_tokens"] == 64 and out["temperature"] == 0.5 and out["top_p"] == 0.9
    assert out["seed"] == 3 and out["user"] == "u"
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": True},
    }
    assert out["reasoning_effort"] == "low" and out["max_reasoning_tokens"] == 100
    assert out["logprobs"] is True and out["top_logprobs"] == 2
    assert chat(text={"format": {"type": "json_object"}})["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat(text={"format": {"type": "text"}})


def test_the_fields_sglangs_gateway_adds_are_taken_and_passed_on():
    """smg adds these to every /v1/responses body (docs/scale-out.md)."""
    out = chat(store=True, temperature=1.0, priority=0, top_k=-1, min_p=0.0, repetition_penalty=1.0)
    assert (out["top_k"], out["min_p"], out["repetition_penalty"], out["temperature"]) == (-1, 0.0, 1.0, 1.0)
    assert (chat(top_k=5)["top_k"], chat(min_p=0.2)["min_p"]) == (5, 0.2)
    with pytest.raises(ValueError, match="priority"):
        request(priority=1)  # SGLang's priority scheduling is off: only the default


def test_top_logprobs_without_the_include_asks_for_no_logprobs():
    """As OpenAI: the logprobs come only with include message.output_text.logprobs."""
    out = chat(top_logprobs=3)
    assert "logprobs" not in out and "top_logprobs" not in out


def test_flat_tools_become_chat_tools_and_tool_choice_follows():
    out = chat(tools=[WEATHER, TIME], tool_choice={"type": "function", "name": "get_time"}, parallel_tool_calls=False)
    assert out["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["parameters"]}},
        {"type": "function", "function": {"name": "get_time"}},
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert out["parallel_tool_calls"] is False
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}
    assert chat(tools=[WEATHER, TIME], tool_choice=allowed)["tool_choice"] == {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]},
    }
    assert chat(tools=[WEATHER], tool_choice="required")["tool_choice"] == "required"


def test_without_tools_the_tool_settings_that_mean_nothing_are_left_out():
    """OpenAI clients send tools: [] with tool_choice "auto"; the chat checks would refuse them."""
    out = chat(tools=[], tool_choice="auto", parallel_tool_calls=True)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & out.keys()
    assert chat(tool_choice="required")["tool_choice"] == "required"  # still reaches the chat checks (400)


def test_an_assistant_turn_of_several_items_is_one_chat_message():
    converted, _ = to_chat_request(
        request(
            input=[
                USER,
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "two cities"}]},
                {"role": "assistant", "content": "Checking."},
                call("c1"),
                call("c2", arguments='{"city": "Rome"}'),
                output("c1"),
                output("c2", "rain"),
                {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny, rain.", "annotations": []}]},
            ]
        )
    )
    roles = [m.role for m in converted.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    turn = converted.messages[1]
    assert turn.reasoning_content == "two cities" and turn.content == "Checking."
    assert [(c.id, c.function.arguments) for c in turn.tool_calls] == [
        ("c1", '{"city": "Paris"}'),
        ("c2", '{"city": "Rome"}'),
    ]
    assert [(m.tool_call_id, m.content) for m in converted.messages[2:4]] == [("c1", "sunny"), ("c2", "rain")]
    assert [p.text for p in converted.messages[4].content] == ["Sunny, rain."]


def test_items_of_different_turns_stay_apart():
    converted, _ = to_chat_request(
        request(
            input=[
                USER,
                call("c1"),
                {"role": "assistant", "content": "after the call"},  # text after calls: a new turn
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}]},
                call("c2"),
            ]
        )
    )
    assert [m.role for m in converted.messages] == ["user", "assistant", "assistant", "assistant"]
    assert converted.messages[1].content is None and converted.messages[1].tool_calls[0].id == "c1"
    assert converted.messages[2].content == "after the call" and not converted.messages[2].tool_calls
    assert (
        converted.messages[3].reasoning_content == "only a summary" and converted.messages[3].tool_calls[0].id == "c2"
    )


def test_history_comes_after_the_instructions_and_its_calls_can_be_answered():
    earlier = ResponseBuilder(request()).from_completion(chat_completion(None, tool_calls=[TOOL_CALL_A]))
    history = [*request().input, *earlier.output]
    converted, params = to_chat_request(request(instructions="sys", input=[output("call_a")]), history)
    assert [m.role for m in converted.messages] == ["system", "user", "assistant", "tool"]
    assert converted.messages[2].tool_calls[0].id == "call_a"
    assert params.to_front("messages.2.tool_calls.0.function.arguments") == "previous_response_id"
    assert params.to_front("messages.3.tool_call_id") == "input.0.call_id"


@pytest.mark.parametrize(
    "items, param",
    [
        ([USER, output("nope")], "input.1.call_id"),
        ([USER, output("c1"), call("c1")], "input.1.call_id"),  # answered before it was made
        ([USER, call("c1"), {"type": "custom_tool_call_output", "call_id": "c1", "output": "x"}], "input.2.call_id"),
    ],
)
def test_an_output_must_answer_an_earlier_call(items, param):
    with pytest.raises(InvalidRequestError) as err:
        to_chat_request(request(input=items))
    assert err.value.param == param and err.value.status == 400


def test_an_unknown_item_is_a_400_naming_it():
    """The wire model refuses unknown types; an item of another kind (history) is refused here."""
    with pytest.raises(InvalidRequestError) as err:
        to_chat_request(request(), history=[object()])
    assert err.value.param == "previous_response_id"


def test_a_summary_we_cannot_write_is_refused():
    with pytest.raises(UnsupportedParameterError) as err:
        to_chat_request(request(reasoning={"summary": "detailed"}))
    assert err.value.param == "reasoning.summary"


# --- custom tools ------------------------------------------------------------------------

CUSTOM = {
    "type": "custom",
    "name": "run",
    "description": "a shell",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
CUSTOM_CALL = {"type": "custom_tool_call", "call_id": "k1", "name": "run", "input": "ls"}


def test_custom_tools_take_openai_chats_shapes():
    tool = custom_tool(CustomTool.model_validate(CUSTOM))
    TypeAdapter(ChatCompletionCustomToolParam).validate_python(tool, strict=True)
    assert tool["custom"]["format"] == {"type": "grammar", "grammar": {"definition": "start: /.+/", "syntax": "lark"}}
    made = custom_call(CustomToolCallItem.model_validate(CUSTOM_CALL))
    TypeAdapter(ChatCompletionMessageCustomToolCallParam).validate_python(made, strict=True)


def test_custom_tools_pass_through_to_chat():
    out = chat(
        tools=[CUSTOM],
        tool_choice={"type": "custom", "name": "run"},
        input=[USER, CUSTOM_CALL, {"type": "custom_tool_call_output", "call_id": "k1", "output": "a"}],
    )
    assert out["tools"][0]["custom"]["name"] == "run" and out["tool_choice"] == {
        "type": "custom",
        "custom": {"name": "run"},
    }
    assert out["messages"][1]["tool_calls"] == [
        {"id": "k1", "type": "custom", "custom": {"name": "run", "input": "ls"}}
    ]
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "k1", "content": "a"}


# --- error paths: the chat pipeline's params mapped back ----------------------------------

LIMITS = ServingLimits(
    "m", context_length=4096, max_n=1, default_max_tokens=None, reasoning=ReasoningPolicy(True, (("low", 256),))
)
FORMATS = ModelFormats(
    tools=get_format("qwen"), reasoning=ReasoningSetup(QWEN3, end_id=1, forced_ids=(2,), separator_ids=(3,))
)
NOT_ENFORCEABLE = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
# refused before the grammar check: for a whole-grammar schema the check asks llguidance first
OPENAPI_ONLY = {"type": "object", "properties": {"a": {"type": "string", "nullable": True}}}


@pytest.mark.parametrize(
    "kw, param",
    [
        ({"model": "other"}, "model"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"input": []}, "input"),
        ({"input": [USER, call("c1", arguments="[1]")]}, "input.1.arguments"),
        ({"input": [USER, {"role": "assistant", "content": "a"}, call("c1", arguments="x")]}, "input.2.arguments"),
        ({"tools": [WEATHER, WEATHER]}, "tools.1.name"),
        ({"tools": [{**WEATHER, "parameters": {"type": "array"}}]}, "tools.0.parameters"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
        (
            {
                "tools": [WEATHER],
                "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]},
            },
            "tool_choice.tools.0.name",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"reasoning": {"effort": "low", "max_tokens": 10}}, "reasoning.max_tokens"),
        ({"reasoning": {"max_tokens": 500}, "max_output_tokens": 100}, "reasoning.max_tokens"),
        ({"tools": [{**WEATHER, "parameters": NOT_ENFORCEABLE}]}, "tools.0.parameters"),
        ({"text": {"format": {"type": "json_schema", "name": "n", "schema": OPENAPI_ONLY}}}, "text.format.schema"),
    ],
)
def test_pipeline_errors_name_the_responses_field(kw, param):
    converted, params = to_chat_request(request(**kw))
    with pytest.raises((ServiceError, GrammarError)) as err:
        build_constraint(validate_request(converted, LIMITS, FORMATS), False)
    assert params.to_front(err.value.param) == param, err.value.param


PARAMS = ResponsesParamMap(
    (
        Origin("instructions", "instructions"),
        Origin("previous_response_id"),
        Origin("input.0", "input.0.content"),
        Origin("input.1", "input.2.content", "input.1.content", ("input.3", "input.4")),
        Origin("input.5", "input.5.output", call_id="input.5.call_id"),
    )
)


@pytest.mark.parametrize(
    "chat_param, responses_param",
    [
        (None, None),
        ("messages.0.content", "instructions"),
        ("messages.1.content", "previous_response_id"),
        ("messages.2.content.1.text", "input.0.content.1.text"),
        ("messages.2.role", "input.0.role"),
        ("messages.3", "input.1"),
        ("messages.3.content", "input.2.content"),
        ("messages.3.reasoning_content", "input.1.content"),
        ("messages.3.tool_calls", "input.3"),
        ("messages.3.tool_calls.1.function.arguments", "input.4.arguments"),
        ("messages.3.tool_calls.1.id", "input.4.call_id"),
        ("messages.3.tool_calls.0.custom.input", "input.3.input"),
        ("messages.4.tool_call_id", "input.5.call_id"),
        ("messages.4.content", "input.5.output"),
        ("messages.9", "input"),
        ("max_tokens", "max_output_tokens"),
        ("stream_options.include_usage", "stream"),
        ("logprobs", "include"),
        ("response_format", "text.format"),
        ("response_format.json_schema.name", "text.format.name"),
        ("tools.2.function", "tools.2"),
        ("tools.2.custom.format.grammar.definition", "tools.2.format.definition"),
        ("tool_choice.custom.name", "tool_choice.name"),
        ("tool_choice.allowed_tools.mode", "tool_choice.mode"),
        ("n", None),
        ("chat_template_kwargs.enable_thinking", None),
    ],
)
def test_param_map(chat_param, responses_param):
    assert PARAMS.to_front(chat_param) == responses_param

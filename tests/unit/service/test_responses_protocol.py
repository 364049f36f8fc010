"""The Responses wire models (pure: pydantic, FastAPI with the service's error handlers, the
openai package's types): a request is strict and a wrong item is a 400 naming its Responses
path; every Response object and stream event we produce parses with the openai package."""

from __future__ import annotations

import json
import typing

import openai.types.responses as oai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api.errors import install_error_handlers
from service.fronts.responses import ResponseBuilder, ResponseEventStream
from service.protocol.openai import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    CustomCall,
    CustomToolCall,
    Delta,
    DeltaFunction,
    DeltaToolCall,
    FunctionCall,
    TokenLogprobOut,
    ToolCall,
    TopLogprob,
    Usage,
)
from service.protocol.responses import (
    AssistantMessageItem,
    FunctionCallItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
)
from service.protocol.responses_output import Response

USER = {"role": "user", "content": "hi"}


def body(**kw):
    return {"model": "m", "input": [USER], **kw}


@pytest.fixture(scope="module")
def client():
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/responses")
    async def responses(request: ResponsesRequest) -> dict:
        return {"ok": True}

    return TestClient(app)


def error_of(client, payload):
    resp = client.post("/v1/responses", json=payload)
    assert resp.status_code == 400, resp.text
    return resp.json()["error"]


# --- requests ----------------------------------------------------------------------------


def test_input_is_a_string_or_items_and_a_message_may_leave_out_its_type():
    assert ResponsesRequest.model_validate({"model": "m", "input": "hi"}).input == "hi"
    req = ResponsesRequest.model_validate(
        body(
            input=[
                {"role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
                {"type": "message", "role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            ]
        )
    )
    kinds = [type(i) for i in req.input]
    assert kinds == [MessageItem, MessageItem, AssistantMessageItem, ReasoningItem, FunctionCallItem]
    assert req.store is False and req.stream is False


@pytest.mark.parametrize(
    "overrides, param, code",
    [
        ({"input": [USER, {"type": "item_reference", "id": "x"}]}, "input.1", "invalid_value"),
        ({"input": [{"content": "no role"}]}, "input.0", "invalid_value"),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input.0.call_id",
            "missing_required_parameter",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input.0.call_id", "missing_required_parameter"),
        (
            {"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
            "input.0.content.0.type",
            "invalid_value",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role", "invalid_value"),
        (
            {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]},
            "input.0.encrypted_content",
            "invalid_value",
        ),
        ({"include": ["reasoning.encrypted_content"]}, "include.0", "invalid_value"),
        ({"truncation": "auto"}, "truncation", "invalid_value"),
        ({"max_output_tokens": "5"}, "max_output_tokens", "invalid_value"),
        ({"stream": "yes"}, "stream", "invalid_value"),
        ({"top_logprobs": 21}, "top_logprobs", "invalid_value"),
        ({"frequency_penalty": 1}, "frequency_penalty", "unsupported_parameter"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools.0.name", "missing_required_parameter"),
        ({"tools": [{"type": "web_search"}]}, "tools.0", "invalid_value"),
        (
            {
                "tools": [
                    {"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}}
                ]
            },
            "tools.0.format.syntax",
            "invalid_value",
        ),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "missing_required_parameter"),
        (
            {"text": {"format": {"type": "json_schema", "name": "x"}}},
            "text.format.schema",
            "missing_required_parameter",
        ),
        ({"metadata": {"k": "v" * 513}}, "metadata.k", "invalid_value"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
    ],
)
def test_a_wrong_request_is_a_400_naming_the_responses_path(client, overrides, param, code):
    err = error_of(client, body(**overrides))
    assert (err["param"], err["code"]) == (param, code), err


def test_an_unknown_item_type_lists_the_supported_ones(client):
    err = error_of(client, body(input=[{"type": "item_reference", "id": "x"}]))
    assert "function_call_output" in err["message"] and "custom_tool_call" in err["message"]


def test_the_json_schema_format_keeps_the_name_schema_on_the_wire():
    req = ResponsesRequest.model_validate(
        body(text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}})
    )
    assert req.model_dump()["text"]["format"]["schema"] == {"type": "object"}  # no by_alias needed (SSE framing)


# --- what we return parses with the openai package -----------------------------------------

REQUEST = ResponsesRequest.model_validate(
    body(
        instructions="be brief",
        tools=[
            {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
            {
                "type": "custom",
                "name": "run",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
            },
        ],
        tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]},
        text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}},
        reasoning={"effort": "low", "max_tokens": 100},
        include=["message.output_text.logprobs"],
        top_logprobs=1,
        metadata={"k": "v"},
        max_output_tokens=50,
    )
)
USAGE = Usage(
    prompt_tokens=10,
    completion_tokens=7,
    total_tokens=17,
    prompt_tokens_details={"cached_tokens": 4},
    completion_tokens_details={"reasoning_tokens": 3},
)
LOGPROBS = ChoiceLogprobs(
    content=[
        TokenLogprobOut(
            token="Hi",
            logprob=-0.1,
            bytes=[72, 105],
            top_logprobs=[TopLogprob(token="Hi", logprob=-0.1, bytes=[72, 105])],
        )
    ]
)


def completion(message: AssistantMessage, finish_reason="stop", logprobs=None) -> ChatCompletion:
    choice = Choice(index=0, message=message, finish_reason=finish_reason, logprobs=logprobs)
    return ChatCompletion(id="chatcmpl-1", created=1, model="m", choices=[choice], usage=USAGE)


COMPLETIONS = {
    "reasoning and text": completion(AssistantMessage(content="Hi", reasoning_content="think"), logprobs=LOGPROBS),
    "calls": completion(
        AssistantMessage(
            content=None,
            tool_calls=[
                ToolCall(id="call_1", function=FunctionCall(name="get_weather", arguments='{"city": "Paris"}')),
                CustomToolCall(id="call_2", custom=CustomCall(name="run", input="ls")),
            ],
        ),
        finish_reason="tool_calls",
    ),
    "cut": completion(AssistantMessage(content="Hel"), finish_reason="length"),
    "empty": completion(AssistantMessage(content=None)),
}


def sdk_response(response: Response) -> oai.Response:
    return oai.Response.model_validate(json.loads(response.model_dump_json()))


@pytest.mark.parametrize("name", COMPLETIONS)
def test_every_response_parses_with_the_openai_package(name):
    ours = ResponseBuilder(REQUEST).from_completion(COMPLETIONS[name])
    theirs = sdk_response(ours)
    assert theirs.id == ours.id and theirs.status == ours.status and len(theirs.output) == len(ours.output)
    assert [o.type for o in theirs.output] == [o.type for o in ours.output]
    assert (
        theirs.usage.input_tokens_details.cached_tokens == 4
        and theirs.usage.output_tokens_details.reasoning_tokens == 3
    )
    assert theirs.text.format.schema_ == {"type": "object"} and theirs.tools[1].type == "custom"
    # nothing lost or reinterpreted: the SDK's view is ours, field by field
    assert theirs.model_dump(mode="json", by_alias=True, exclude_none=True) == json.loads(
        ours.model_dump_json(exclude_none=True)
    )


def test_the_sdk_reads_the_text_and_logprobs():
    theirs = sdk_response(ResponseBuilder(REQUEST).from_completion(COMPLETIONS["reasoning and text"]))
    assert theirs.output_text == "Hi"
    assert theirs.output[1].content[0].logprobs[0].bytes == [72, 105]
    assert theirs.output[0].content[0].text == "think"
    cut = sdk_response(ResponseBuilder(REQUEST).from_completion(COMPLETIONS["cut"]))
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


def test_an_output_item_is_valid_input_as_it_is():
    """A client sends the previous output back (stateless agent loops)."""
    response = ResponseBuilder(REQUEST).from_completion(COMPLETIONS["calls"])
    items = [json.loads(item.model_dump_json()) for item in response.output]
    req = ResponsesRequest.model_validate(body(input=[USER, *items]))
    assert [i.type for i in req.input[1:]] == ["function_call", "custom_tool_call"]


SDK_EVENTS = {
    typing.get_args(cls.model_fields["type"].annotation)[0]: cls
    for cls in typing.get_args(typing.get_args(oai.ResponseStreamEvent)[0])
}


def sdk_event(event) -> object:
    data = json.loads(event.model_dump_json())
    return SDK_EVENTS[data["type"]].model_validate(data)


def chunk(delta: Delta, finish_reason=None, usage=None, logprobs=None) -> ChatCompletionChunk:
    choices = [ChunkChoice(index=0, delta=delta, finish_reason=finish_reason, logprobs=logprobs)]
    return ChatCompletionChunk(id="c", created=1, model="m", choices=[] if usage else choices, usage=usage)


def test_every_stream_event_parses_with_the_openai_package():
    stream = ResponseEventStream(ResponseBuilder(REQUEST))
    events = stream.start()
    for c in [
        chunk(Delta(role="assistant", content="")),
        chunk(Delta(reasoning_content="think")),
        chunk(Delta(content="Hi"), logprobs=LOGPROBS),
        chunk(
            Delta(
                tool_calls=[
                    DeltaToolCall(
                        index=0, id="call_1", type="function", function=DeltaFunction(name="get_weather", arguments="")
                    )
                ]
            )
        ),
        chunk(Delta(tool_calls=[DeltaToolCall(index=0, function=DeltaFunction(arguments="{}"))])),
        chunk(Delta(), finish_reason="length"),
        chunk(Delta(), usage=USAGE),
    ]:
        events += stream.feed(c)
    events += stream.finish() + stream.error("engine failed", "engine_error")
    parsed = [sdk_event(e) for e in events]
    assert {p.type for p in parsed} >= {
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.incomplete",
        "error",
    }
    assert parsed[-2].response.status == "incomplete" and parsed[-2].response.usage.total_tokens == 17

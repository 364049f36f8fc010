"""POST /v1/responses on the real engine through the official openai client."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
CODE = r"[A-Z]{2}-[0-9]{3}"
LARK = 'start: "run " WORD (" " WORD)*\nWORD: /[a-z]{1,8}/\n'


@pytest.fixture(scope="module")
def client(qwen_server):
    return openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="unused", max_retries=0)


def create(client, server, **kw):
    kw.setdefault("input", "Say something.")
    return client.responses.create(model=server.model_name, **kw)


def post(server, body, path="/v1/responses"):
    return httpx.post(f"{server.base_url}{path}", json={"model": server.model_name, **body}, timeout=120)


def test_plain_text_has_a_message_and_usage(client, qwen_server):
    r = create(client, qwen_server, max_output_tokens=16, temperature=0, instructions="Be brief.")
    assert r.object == "response" and r.id.startswith("resp_") and r.output[-1].type == "message"
    assert r.output_text and r.usage.output_tokens <= 16 and r.usage.input_tokens > 0
    assert r.status in ("completed", "incomplete")
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 16


def test_json_schema_output_validates(client, qwen_server):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "out", "schema": schema, "strict": True}
    r = create(client, qwen_server, max_output_tokens=40, temperature=1.0, text={"format": fmt})
    Draft202012Validator(schema).validate(json.loads(r.output_text))


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "name": "get_weather"}], ids=["required", "named"]
)
def test_function_calls_are_items_with_call_ids(client, qwen_server, tool_choice):
    r = create(
        client,
        qwen_server,
        tools=[WEATHER, TIME],
        tool_choice=tool_choice,
        max_output_tokens=60,
        temperature=1.0,
        extra_body={"seed": 4},
    )
    calls = [item for item in r.output if item.type == "function_call"]
    assert calls and all(c.call_id.startswith("call_") and c.id.startswith("fc_") for c in calls)
    for call in calls:
        if call.name == "get_weather":
            Draft202012Validator(WEATHER["parameters"]).validate(json.loads(call.arguments))
    if isinstance(tool_choice, dict):
        assert {c.name for c in calls} == {"get_weather"}


def test_auto_is_a_message_or_valid_calls(client, qwen_server):
    r = create(
        client,
        qwen_server,
        tools=[WEATHER, TIME],
        tool_choice="auto",
        max_output_tokens=60,
        temperature=1.0,
        extra_body={"seed": 2},
    )
    assert {i.type for i in r.output} <= {"message", "function_call"} and r.output
    for call in (i for i in r.output if i.type == "function_call" and i.name == "get_weather"):
        if r.status == "completed":
            Draft202012Validator(WEATHER["parameters"]).validate(json.loads(call.arguments))


def test_parallel_calls_off_gives_one_call(client, qwen_server):
    r = create(
        client,
        qwen_server,
        tools=[WEATHER, TIME],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=60,
        temperature=1.0,
        extra_body={"seed": 1},
    )
    assert len([i for i in r.output if i.type == "function_call"]) == 1


def test_two_turn_tool_loop_with_and_without_stored_state(client, qwen_server):
    first = create(
        client,
        qwen_server,
        input="Weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=60,
        temperature=0,
        store=True,
    )
    call = next(i for i in first.output if i.type == "function_call")
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'}
    stateless = create(
        client,
        qwen_server,
        input=[{"role": "user", "content": "Weather in Paris?"}, *first.output, answer],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=12,
        temperature=0,
    )
    chained = create(
        client,
        qwen_server,
        input=[answer],
        previous_response_id=first.id,
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=12,
        temperature=0,
    )
    assert stateless.output[-1].type == chained.output[-1].type == "message"
    assert stateless.output_text == chained.output_text  # the same conversation, greedy
    assert client.responses.retrieve(first.id).output[0].model_dump() == first.output[0].model_dump()


@pytest.mark.parametrize(
    "syntax, definition, pattern", [("regex", CODE, CODE), ("lark", LARK, r"run [a-z]{1,8}( [a-z]{1,8})*")]
)
def test_custom_tool_input_matches_its_grammar(client, qwen_server, syntax, definition, pattern):
    tool = {
        "type": "custom",
        "name": "shell",
        "description": "Runs a command.",
        "format": {"type": "grammar", "syntax": syntax, "definition": definition},
    }
    r = create(
        client,
        qwen_server,
        tools=[tool, WEATHER],
        tool_choice={"type": "custom", "name": "shell"},
        max_output_tokens=30,
        temperature=1.0,
        extra_body={"seed": 7},
    )
    call = next(i for i in r.output if i.type == "custom_tool_call")
    assert call.name == "shell" and call.call_id.startswith("call_")
    if r.status == "completed":
        assert re.fullmatch(pattern, call.input), call.input


def test_reasoning_item_has_exactly_the_budget(client, qwen_server):
    r = create(
        client,
        qwen_server,
        reasoning={"effort": "low"},
        max_output_tokens=30,
        temperature=0,
        extra_body={"reasoning": {"max_tokens": 5}},
    )
    assert r.output[0].type == "reasoning" and r.output[0].content[0].text
    assert r.usage.output_tokens_details.reasoning_tokens == 5


def test_stream_equals_non_stream(client, qwen_server):
    kw = dict(
        input="Tell me a story.",
        max_output_tokens=20,
        temperature=0,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    full = create(client, qwen_server, **kw)
    with client.responses.stream(model=qwen_server.model_name, **kw) as stream:
        events = list(stream)
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"] and "response.output_text.delta" in types
    assert types[-1] == f"response.{full.status}" and [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # the SDK keeps a final response only for response.completed
    assert final.output_text == full.output_text
    same_logprobs(final.output[-1].content[0].logprobs, full.output[-1].content[0].logprobs)
    assert len(full.output[-1].content[0].logprobs) == full.usage.output_tokens - (full.status == "completed")


def same_logprobs(got: list, want: list, tol: float = 1e-4) -> None:
    """Same tokens, bytes and alternatives; values equal to float noise: the second request reads
    the first one's prompt from the prefix cache (an extend over a cached prefix, not a full
    prefill) and may share a decode batch with other rows (the batch's longest row sets the
    attention's reduction blocks), each of which moves float32 logprobs by ~1e-6 (seen in CI)."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a.token, a.bytes) == (b.token, b.bytes) and abs(a.logprob - b.logprob) <= tol, (a, b)
        assert [(t.token, t.bytes) for t in a.top_logprobs] == [(t.token, t.bytes) for t in b.top_logprobs], (a, b)
        assert all(abs(x.logprob - y.logprob) <= tol for x, y in zip(a.top_logprobs, b.top_logprobs)), (a, b)


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"input": [{"type": "shell_call", "x": 1}]}, 400, "input.0"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, 400, "input.0.call_id"),
        ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, 400, "input.0.call_id"),
        ({"input": "hi", "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
        ({"input": "hi", "max_output_tokens": 10**7}, 400, "max_output_tokens"),
        (
            {
                "input": "hi",
                "tools": [
                    {
                        "type": "custom",
                        "name": "t",
                        "format": {"type": "grammar", "syntax": "lark", "definition": "start: x\n%declare X"},
                    }
                ],
                "tool_choice": {"type": "custom", "name": "t"},
            },
            400,
            "tools.0.format.definition",
        ),
    ],
)
def test_bad_input_is_an_openai_error_naming_the_responses_field(qwen_server, body, status, param):
    r = post(qwen_server, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_an_unknown_response_id_is_a_404(qwen_server):
    r = httpx.get(f"{qwen_server.base_url}/v1/responses/resp_nope", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"


def test_a_custom_tool_under_required_is_a_custom_tool_call(client, qwen_server):
    tool = {"type": "custom", "name": "shell", "format": {"type": "grammar", "syntax": "lark", "definition": LARK}}
    r = create(
        client,
        qwen_server,
        tools=[tool],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=60,
        temperature=1.0,
        extra_body={"seed": 5},
    )
    (call,) = [i for i in r.output if i.type == "custom_tool_call"]
    assert call.name == "shell" and not [i for i in r.output if i.type == "function_call"]
    if r.status == "completed":
        assert re.fullmatch(r"run [a-z]{1,8}( [a-z]{1,8})*", call.input), call.input

"""POST /v1/messages with the official ``anthropic`` SDK over real HTTP on the real engine
(SmolLM2 and the tiny Qwen3): text, multi-turn, stop sequences, the max_tokens cut, the
tool agent loop streamed and not (the SDK's accumulated stream equals the non-streamed
message, greedy), the exact thinking budget, and a battery of malformed bodies: each a 4xx in
Anthropic's envelope naming the field, never a 5xx."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}


def client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0, timeout=300)


def ask(server, **kw) -> tuple[anthropic.types.Message, anthropic.types.Message]:
    """The same greedy request non-streamed and through ``messages.stream()``."""
    kw = {"model": server.model_name, "extra_body": {"temperature": 0.0}} | kw
    plain = client(server).messages.create(**kw)
    with client(server).messages.stream(**kw) as stream:
        streamed = stream.get_final_message()
    return plain, streamed


def same(a: anthropic.types.Message, b: anthropic.types.Message) -> None:
    """Equal but for the ids and the prompt-cache hits (the second request reuses the first's prompt)."""
    skip = {"id": True, "usage": {"cache_read_input_tokens"}, "content": {"__all__": {"id"}}}
    assert a.model_dump(exclude=skip, exclude_none=True) == b.model_dump(exclude=skip, exclude_none=True)


@pytest.fixture(params=["qwen_server", "smol_server"])
def server(request):
    return request.getfixturevalue(request.param)


def test_text_multi_turn_and_the_max_tokens_cut(server):
    history = [
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": [{"type": "text", "text": "Blue."}]},
        {"role": "user", "content": [{"type": "text", "text": "Now write a long story about the sea."}]},
    ]
    plain, streamed = ask(server, max_tokens=6, system="You are brief.", messages=history)
    same(plain, streamed)
    assert plain.id.startswith("msg_") and plain.role == "assistant" and plain.type == "message"
    assert plain.stop_reason == "max_tokens" and plain.usage.output_tokens == 6
    assert plain.content[0].type == "text" and plain.content[0].text
    assert plain.usage.input_tokens > 10
    count = client(server).messages.count_tokens(model=server.model_name, system="You are brief.", messages=history)
    assert count.input_tokens == plain.usage.input_tokens


def test_stop_sequences_end_the_turn_there(smol_server):
    """On SmolLM2 (real text: the tiny random Qwen3 repeats one character from the start)."""
    server, msgs = smol_server, [{"role": "user", "content": "Write one sentence about the sea."}]
    free, _ = ask(server, max_tokens=24, messages=msgs)
    text = free.content[0].text
    at = next(i for i in range(1, len(text)) if text.find(text[i]) == i)  # a character's first occurrence
    stop = text[at]
    plain, streamed = ask(server, max_tokens=24, messages=msgs, stop_sequences=["\x00never", stop])
    same(plain, streamed)
    assert (plain.stop_reason, plain.stop_sequence) == ("stop_sequence", stop)
    assert plain.content[0].text == text[:at]


def test_agent_loop_tool_use_then_result_then_answer(qwen_server):
    msgs: list[dict] = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
    choice = {"type": "any", "disable_parallel_tool_use": True}  # one call, then the turn ends
    plain, streamed = ask(qwen_server, max_tokens=120, messages=msgs, tools=[WEATHER], tool_choice=choice)
    same(plain, streamed)
    assert plain.stop_reason == "tool_use"
    uses = [b for b in plain.content if b.type == "tool_use"]
    assert len(uses) == 1 and all(u.id.startswith("toolu_") and u.name == "get_weather" for u in uses)
    for use in uses:
        Draft202012Validator(WEATHER["input_schema"]).validate(use.input)
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": "sunny"} for u in uses]
    msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in plain.content]}]
    msgs += [{"role": "user", "content": results}]
    plain, streamed = ask(qwen_server, max_tokens=12, messages=msgs, tools=[WEATHER], tool_choice={"type": "none"})
    same(plain, streamed)
    assert plain.stop_reason in ("end_turn", "max_tokens") and plain.content[0].type == "text"


def test_thinking_budget_is_exact_and_comes_back_in_history(qwen_server):
    """The tiny random Qwen3 never closes its reasoning by itself: the budget is spent in full.
    The thinking block is the chat reasoning of the same greedy request, whose usage counts
    exactly ``budget`` reasoning tokens."""
    budget, msgs = 16, [{"role": "user", "content": "Think, then answer: 2+2?"}]
    plain, streamed = ask(
        qwen_server, max_tokens=40, messages=msgs, thinking={"type": "enabled", "budget_tokens": budget}
    )
    same(plain, streamed)
    assert [b.type for b in plain.content][:2] == ["thinking", "text"]
    chat = openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="x", max_retries=0).chat.completions.create(
        model=qwen_server.model_name,
        messages=msgs,
        max_completion_tokens=40,
        temperature=0.0,
        extra_body={"enable_thinking": True, "max_reasoning_tokens": budget},
    )
    assert chat.usage.completion_tokens_details.reasoning_tokens == budget
    assert plain.content[0].thinking == chat.choices[0].message.reasoning_content
    assert plain.usage.output_tokens == chat.usage.completion_tokens > budget
    again = msgs + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in plain.content]},
        {"role": "user", "content": "Thanks."},
    ]
    follow = client(qwen_server).messages.create(
        model=qwen_server.model_name, max_tokens=8, messages=again, thinking={"type": "disabled"}
    )
    assert follow.content and all(b.type != "thinking" for b in follow.content)


USER = {"role": "user", "content": "hi"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": 1}}
BAD = [
    ({"messages": [USER]}, "max_tokens"),
    ({"max_tokens": 8}, "messages"),
    ({"max_tokens": 8, "messages": []}, "messages"),
    ({"max_tokens": 8, "messages": [{"role": "assistant", "content": "x"}]}, "messages.0.role"),
    ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"max_tokens": 8, "messages": [USER], "temprature": 1}, "temprature"),
    ({"max_tokens": "8", "messages": [USER]}, "max_tokens"),
    ({"max_tokens": 0, "messages": [USER]}, "max_tokens"),
    ({"max_tokens": 8, "messages": [USER], "temperature": 1.5}, "temperature"),
    ({"max_tokens": 8, "messages": [USER], "top_k": -1}, "top_k"),
    ({"max_tokens": 8, "messages": [USER], "stop_sequences": "END"}, "stop_sequences"),
    (
        {"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        "messages.0.content.0",
    ),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [CALL]}]}, "messages.0.content.0.type"),
    (
        {
            "max_tokens": 8,
            "messages": [
                USER,
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]},
            ],
        },
        "messages.2.content.0.tool_use_id",
    ),
    (
        {"max_tokens": 8, "messages": [USER, {"role": "assistant", "content": [CALL | {"input": "x"}]}]},
        "messages.1.content.0.input",
    ),
    ({"max_tokens": 8, "messages": [USER, {"role": "assistant", "content": "x"}]}, "messages.1.role"),
    (
        {"max_tokens": 8, "messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 8}},
        "thinking.budget_tokens",
    ),
    ({"max_tokens": 8, "messages": [USER], "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"max_tokens": 8, "messages": [USER], "thinking": {"type": "sometimes"}}, "thinking"),
    ({"max_tokens": 8, "messages": [USER], "tool_choice": {"type": "any"}}, "tool_choice"),
    (
        {"max_tokens": 8, "messages": [USER], "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
        "tool_choice",
    ),
    (
        {
            "max_tokens": 8,
            "messages": [USER],
            "tools": [
                WEATHER
                | {"input_schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}}}
            ],
        },
        "tools.0.input_schema",
    ),
    ({"max_tokens": 8, "messages": [USER], "tools": [{"name": "bad name!", "input_schema": {}}]}, "tools.0.name"),
    ({"max_tokens": 8, "messages": [USER], "metadata": {"user": "u"}}, "metadata.user"),
    ({"max_tokens": 8, "messages": [USER], "system": [{"type": "image"}]}, "system"),
    ({"max_tokens": 1 << 20, "messages": [USER]}, "max_tokens"),
]


@pytest.mark.parametrize(("body", "field"), BAD)
def test_malformed_bodies_are_4xx_in_anthropic_envelope_naming_the_field(qwen_server, body, field):
    resp = httpx.post(
        f"{qwen_server.base_url}/v1/messages",
        json={"model": qwen_server.model_name} | body,
        headers={"x-api-key": "x", "anthropic-version": "2023-06-01"},
        timeout=120,
    )
    assert 400 <= resp.status_code < 500, resp.text
    payload = resp.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error", payload
    assert field in payload["error"]["message"], payload

"""Reasoning through the real engine on the tiny Qwen3 (real Qwen3 template and tokenizer).

The random-weight model never closes ``</think>`` by itself, so every budget is spent in
full and the end marker is forced: the reasoning-token count must equal the budget.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

USER = [{"role": "user", "content": "Think about the weather, then answer."}]
LABEL = {"type": "object", "properties": {"label": {"enum": ["spam", "ham"]}}, "required": ["label"],
         "additionalProperties": False}
PICK = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"color": {"enum": ["red", "blue"]}}, "required": ["color"],
    "additionalProperties": False}}}


def client(server):
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)


def chat(server, **kw):
    kw = {"model": server.model_name, "messages": USER, "max_tokens": 96, "temperature": 1.0, "seed": 1, **kw}
    return client(server).chat.completions.create(**kw)


def post(server, **body):
    payload = {"model": server.model_name, "messages": USER, "max_tokens": 32, **body}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=payload, timeout=120)


@pytest.mark.parametrize("budget", [0, 1, 16, 64])
def test_budget_is_exact_and_the_answer_follows(qwen_server, budget):
    resp = chat(qwen_server, extra_body={"enable_thinking": True, "max_reasoning_tokens": budget})
    msg, usage = resp.choices[0].message, resp.usage
    assert usage.completion_tokens_details.reasoning_tokens == budget
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning == msg.model_extra["reasoning"]
    assert (reasoning == "") is (budget == 0)
    assert "</think>" not in reasoning and "</think>" not in (msg.content or "")
    # the answer phase ran: forced "\n</think>\n\n" (3 tokens) + answer up to max_tokens
    assert usage.completion_tokens == 96 or resp.choices[0].finish_reason == "stop"
    assert usage.completion_tokens > budget + 3 and msg.content


def test_budget_then_json_schema_answer_validates(qwen_server):
    fmt = {"type": "json_schema", "json_schema": {"name": "label", "schema": LABEL}}
    for seed in range(3):
        resp = chat(qwen_server, seed=seed, response_format=fmt,
                    extra_body={"enable_thinking": True, "max_reasoning_tokens": 16})
        choice = resp.choices[0]
        assert resp.usage.completion_tokens_details.reasoning_tokens == 16
        assert choice.finish_reason == "stop", choice
        Draft202012Validator(LABEL).validate(json.loads(choice.message.content))
        assert choice.model_extra["schema_validation"]["valid"] is True


def test_budget_then_required_tool_call(qwen_server):
    resp = chat(qwen_server, tools=[PICK], tool_choice="required", parallel_tool_calls=False,
                extra_body={"enable_thinking": True, "max_reasoning_tokens": 8})
    choice = resp.choices[0]
    assert resp.usage.completion_tokens_details.reasoning_tokens == 8 and choice.message.model_extra["reasoning_content"]
    assert choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments)["color"] in ("red", "blue")


def test_stream_assembles_to_the_non_stream_result(qwen_server):
    kw = dict(extra_body={"enable_thinking": True, "max_reasoning_tokens": 12}, seed=7, max_tokens=40)
    full = chat(qwen_server, **kw).choices[0]
    reasoning, content, order = "", "", []
    for chunk in chat(qwen_server, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            assert chunk.usage.completion_tokens_details.reasoning_tokens == 12
        for c in chunk.choices:
            r = (c.delta.model_extra or {}).get("reasoning_content")
            assert r == (c.delta.model_extra or {}).get("reasoning")
            if r:
                reasoning += r
                order.append("r")
            if c.delta.content:
                content += c.delta.content
                order.append("c")
    assert reasoning == full.message.model_extra["reasoning_content"] and content == full.message.content
    assert order == sorted(order, reverse=True)  # all reasoning before any content


@pytest.mark.parametrize("off", [{"enable_thinking": False}, {"chat_template_kwargs": {"enable_thinking": False}},
                                 {"reasoning_effort": "none"}, {}])
def test_thinking_off_means_no_reasoning(qwen_server, off):
    resp = chat(qwen_server, max_tokens=16, extra_body=off)  # {}: this server's default is off
    assert resp.choices[0].message.model_extra.get("reasoning_content") is None
    assert resp.usage.completion_tokens_details.reasoning_tokens == 0


def test_reasoning_effort_maps_to_the_configured_budget(qwen_server):
    resp = chat(qwen_server, max_tokens=80, extra_body={"reasoning_effort": "minimal"})  # minimal: 64
    assert resp.usage.completion_tokens_details.reasoning_tokens == 64


@pytest.mark.parametrize("body, param", [
    ({"max_reasoning_tokens": -1, "enable_thinking": True}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": 1.5, "enable_thinking": True}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": "10", "enable_thinking": True}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": 32, "enable_thinking": True}, "max_reasoning_tokens"),  # == max_tokens
    ({"max_reasoning_tokens": 8, "enable_thinking": False}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": 8, "reasoning_effort": "low", "enable_thinking": True}, "max_reasoning_tokens"),
    ({"reasoning_effort": "huge"}, "reasoning_effort"),
    ({"enable_thinking": True, "chat_template_kwargs": {"enable_thinking": False}}, "enable_thinking"),
    ({"reasoning_effort": "none", "enable_thinking": True}, "reasoning_effort"),
])
def test_invalid_budgets_are_400s(qwen_server, body, param):
    resp = post(qwen_server, **body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param, resp.json()


def test_alias_max_thinking_tokens(qwen_server):
    resp = post(qwen_server, enable_thinking=True, max_thinking_tokens=5, max_tokens=24)
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5


def test_a_model_without_reasoning_refuses_thinking(smol_server):
    resp = post(smol_server, enable_thinking=True)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "enable_thinking"
    assert "no reasoning format" in resp.json()["error"]["message"]

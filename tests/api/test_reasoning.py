"""Reasoning through the real engine on the tiny Qwen3 (real Qwen3 template and tokenizer).

The random-weight model never closes ``</think>`` by itself, so on ``qwen_server`` every
budget is spent in full and the end marker is forced: the reasoning-token count must equal
the budget. ``scripted`` is the same service started through tests/scripted_serve.py, whose
only change biases the real sampler of the reasoning phase (SGLang ``logit_bias`` +
``min_new_tokens``, or a ``regex``), so the model closes its block, or ends with EOS, at a
chosen step, or writes a given reasoning text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

from tests.server import ScriptedServer, ServerProcess

USER = [{"role": "user", "content": "Think about the weather, then answer."}]
LABEL = {
    "type": "object",
    "properties": {"label": {"enum": ["spam", "ham"]}},
    "required": ["label"],
    "additionalProperties": False,
}
PICK = {
    "type": "function",
    "function": {
        "name": "pick",
        "parameters": {
            "type": "object",
            "properties": {"color": {"enum": ["red", "blue"]}},
            "required": ["color"],
            "additionalProperties": False,
        },
    },
}


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
        resp = chat(
            qwen_server,
            seed=seed,
            response_format=fmt,
            extra_body={"enable_thinking": True, "max_reasoning_tokens": 16},
        )
        choice = resp.choices[0]
        assert resp.usage.completion_tokens_details.reasoning_tokens == 16
        assert choice.finish_reason == "stop", choice
        Draft202012Validator(LABEL).validate(json.loads(choice.message.content))
        assert choice.model_extra["schema_validation"]["valid"] is True


def test_budget_then_required_tool_call(qwen_server):
    resp = chat(
        qwen_server,
        tools=[PICK],
        tool_choice="required",
        parallel_tool_calls=False,
        extra_body={"enable_thinking": True, "max_reasoning_tokens": 8},
    )
    choice = resp.choices[0]
    assert (
        resp.usage.completion_tokens_details.reasoning_tokens == 8 and choice.message.model_extra["reasoning_content"]
    )
    assert choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments)["color"] in ("red", "blue")


def test_stream_assembles_to_the_non_stream_result(qwen_server):
    kw = dict(extra_body={"enable_thinking": True, "max_reasoning_tokens": 12}, seed=7, max_tokens=40)
    full = chat(qwen_server, **kw).choices[0]
    reasoning, content, order, _, usage, _ = stream_parts(qwen_server, **kw)
    assert usage.completion_tokens_details.reasoning_tokens == 12
    assert reasoning == full.message.model_extra["reasoning_content"] and content == full.message.content
    assert order == sorted(order, reverse=True)  # all reasoning before any content


@pytest.mark.parametrize(
    "off",
    [
        {"enable_thinking": False},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"reasoning_effort": "none"},
        {},
    ],
)
def test_thinking_off_means_no_reasoning(qwen_server, off):
    resp = chat(qwen_server, max_tokens=16, extra_body=off)  # {}: this server's default is off
    assert resp.choices[0].message.model_extra.get("reasoning_content") is None
    assert resp.usage.completion_tokens_details.reasoning_tokens == 0


def test_reasoning_effort_maps_to_the_configured_budget(qwen_server):
    resp = chat(qwen_server, max_tokens=80, extra_body={"reasoning_effort": "minimal"})  # minimal: 64
    assert resp.usage.completion_tokens_details.reasoning_tokens == 64


@pytest.mark.parametrize(
    "body, param",
    [
        ({"max_reasoning_tokens": -1, "enable_thinking": True}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": 1.5, "enable_thinking": True}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": "10", "enable_thinking": True}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": 32, "enable_thinking": True}, "max_reasoning_tokens"),  # == max_tokens
        ({"max_reasoning_tokens": 8, "enable_thinking": False}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": 8, "reasoning_effort": "low", "enable_thinking": True}, "max_reasoning_tokens"),
        ({"reasoning_effort": "huge"}, "reasoning_effort"),
        ({"enable_thinking": True, "chat_template_kwargs": {"enable_thinking": False}}, "enable_thinking"),
        ({"reasoning_effort": "none", "enable_thinking": True}, "reasoning_effort"),
    ],
)
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


# -- the model ends its reasoning by itself (scripted) -------------------------------------------


@dataclass
class Scripted:
    server: ServerProcess
    control: ScriptedServer
    end_id: int  # the format's end marker, resolved in the serving tokenizer like the service does
    eos_id: int

    def at_step(self, token_id: int, step: int) -> None:
        """The reasoning phase emits ``token_id`` as its token number ``step`` (0-based): SGLang
        masks stop tokens until ``step`` tokens exist, then the bias makes it the pick."""
        self.write({"logit_bias": {str(token_id): 100.0}, "min_new_tokens": step})

    def write(self, params: dict) -> None:
        self.control.write(params)


@pytest.fixture(scope="module")
def scripted(assets, scripted_server):
    from runtime_ext.formats import select_reasoning_format
    from service.startup import ModelInfo
    from service.tokenizer import HFChatTemplate
    from service.types.serving import ReasoningSetup

    template = HFChatTemplate(assets.qwen3_tiny, ModelInfo.read(assets.qwen3_tiny).model_type)
    setup = ReasoningSetup.build(select_reasoning_format("auto", template.model_type), template.encode)
    return Scripted(scripted_server.server, scripted_server, setup.end_id, template.tokenizer.eos_token_id)


def stream_parts(server, **kw) -> tuple[str, str, list[str], list, object, list[str]]:
    """(reasoning, content, order of r/c deltas, tool-call deltas, usage, finish reasons); every
    delta carries the same text under ``reasoning_content`` and ``reasoning``."""
    reasoning, content, order, calls, usage, finishes = "", "", [], [], None, []
    for chunk in chat(server, stream=True, stream_options={"include_usage": True}, **kw):
        usage = chunk.usage or usage
        for c in chunk.choices:
            r = (c.delta.model_extra or {}).get("reasoning_content")
            assert r == (c.delta.model_extra or {}).get("reasoning")  # the two names carry the same text
            if r:
                reasoning += r
                order.append("r")
            if c.delta.content:
                content += c.delta.content
                order.append("c")
            calls += c.delta.tool_calls or []
            if c.finish_reason:
                finishes.append(c.finish_reason)
    return reasoning, content, order, calls, usage, finishes


THINK = {"enable_thinking": True, "max_reasoning_tokens": 32}


@pytest.mark.parametrize("step", [0, 7])
def test_the_model_closes_its_reasoning_at_step_k(scripted, step):
    scripted.at_step(scripted.end_id, step)
    kw = dict(max_tokens=48, seed=3, extra_body=THINK)
    resp = chat(scripted.server, **kw)
    msg, usage, choice = resp.choices[0].message, resp.usage, resp.choices[0]
    assert usage.completion_tokens_details.reasoning_tokens == step  # the end marker is not reasoning
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning == msg.model_extra["reasoning"] and "</think>" not in reasoning
    assert msg.content and "</think>" not in msg.content
    # step reasoning tokens + </think> + the separator "\n\n", then the answer up to max_tokens
    assert choice.finish_reason == "stop" or usage.completion_tokens == 48
    assert usage.completion_tokens > step + 2
    # streamed: the same split, all reasoning deltas before any content delta, same usage
    s_reasoning, s_content, order, _, s_usage, finishes = stream_parts(scripted.server, **kw)
    assert (s_reasoning, s_content) == (reasoning, msg.content)
    assert "c" in order and order == sorted(order, reverse=True)
    assert ("r" in order) is (reasoning != "")
    assert s_usage.completion_tokens_details.reasoning_tokens == step
    assert s_usage.completion_tokens == usage.completion_tokens and finishes == [choice.finish_reason]


def test_eos_inside_the_reasoning_ends_the_turn(scripted):
    step = 6
    scripted.at_step(scripted.eos_id, step)
    kw = dict(max_tokens=48, seed=5, extra_body=THINK)
    resp = chat(scripted.server, **kw)
    choice, usage = resp.choices[0], resp.usage
    assert choice.finish_reason == "stop"
    assert choice.message.model_extra["reasoning_content"]  # the reasoning is returned
    assert choice.message.content == ""  # no answer phase ran; null is for tool-call-only turns (docs/reasoning.md)
    assert usage.completion_tokens_details.reasoning_tokens == step  # EOS is not a reasoning token
    assert usage.completion_tokens == step + 1
    reasoning, content, order, _, s_usage, finishes = stream_parts(scripted.server, **kw)
    assert reasoning == choice.message.model_extra["reasoning_content"] and content == ""
    assert set(order) == {"r"} and finishes == ["stop"]
    assert s_usage.completion_tokens_details.reasoning_tokens == step


PARTIAL_CALL = '<tool_call>\n{"name": "pick", "arguments": {"color": "'


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_a_call_begun_inside_the_budget_never_gets_the_end_marker(scripted, tool_choice):
    """The model starts a tool call while reasoning and the budget runs out inside its
    arguments (Qwen3 writes every digit as its own token, so 64 digits cannot fit in a budget
    of 60): the forced end marker closes the reasoning, which keeps the half call as text; the
    answer's calls are whole, valid, and free of the marker."""
    scripted.write({"regex": PARTIAL_CALL.replace("{", "\\{") + "[0-9]{64}"})
    # one call: the random model may keep calling until max_tokens when parallel calls are on
    kw = dict(
        max_tokens=140,
        seed=2,
        tools=[PICK],
        tool_choice=tool_choice,
        parallel_tool_calls=False,
        extra_body={"enable_thinking": True, "max_reasoning_tokens": 60},
    )
    resp = chat(scripted.server, **kw)
    choice = resp.choices[0]
    assert resp.usage.completion_tokens_details.reasoning_tokens == 60
    assert choice.message.model_extra["reasoning_content"].startswith(PARTIAL_CALL)
    for call in choice.message.tool_calls or []:
        assert "</think>" not in call.function.arguments
        assert json.loads(call.function.arguments)["color"] in ("red", "blue")
    assert "</think>" not in (choice.message.content or "")
    if tool_choice == "auto":  # the half call stays reasoning: not a call, not content
        assert PARTIAL_CALL not in (choice.message.content or "")
        return
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    reasoning, content, _, calls, _, _ = stream_parts(scripted.server, **kw)
    assert reasoning == choice.message.model_extra["reasoning_content"] and content == (choice.message.content or "")
    arguments = "".join(d.function.arguments or "" for d in calls if d.function)
    assert "</think>" not in arguments
    assert arguments == "".join(c.function.arguments for c in choice.message.tool_calls)

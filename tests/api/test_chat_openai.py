"""The official openai client against structserve over real HTTP (real SGLang engine)."""

from __future__ import annotations

import openai
import pytest
from transformers import AutoTokenizer

HELLO = [{"role": "user", "content": "Write a short story about a robot."}]


@pytest.fixture(scope="module")
def client(qwen_server):
    return openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="unused", max_retries=0)


def _greedy(client, model, **kw):
    return client.chat.completions.create(model=model, messages=HELLO, temperature=0, **kw)


def _seeded(client, model, **kw):
    """Seeded sampling: varied text from the random-weight model, yet repeatable."""
    return client.chat.completions.create(model=model, messages=HELLO, temperature=1.0, seed=1234, **kw)


def test_models_lists_the_served_model(client, qwen_server):
    ids = [m.id for m in client.models.list().data]
    assert ids == [qwen_server.model_name]


def test_non_stream_usage_is_consistent(client, qwen_server):
    out = _greedy(client, qwen_server.model_name, max_tokens=20)
    tok = AutoTokenizer.from_pretrained(str(qwen_server.model_dir))
    # thinking is off on this server: the service writes the empty block exactly as Qwen3's
    # own template does with enable_thinking=False
    expected_prompt = tok.encode(
        tok.apply_chat_template(HELLO, tokenize=False, add_generation_prompt=True, enable_thinking=False),
        add_special_tokens=False,
    )
    choice = out.choices[0]
    assert out.object == "chat.completion" and choice.message.role == "assistant"
    assert out.usage.prompt_tokens == len(expected_prompt)
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert 1 <= out.usage.completion_tokens <= 20
    assert choice.finish_reason in ("stop", "length")
    if choice.finish_reason == "length":
        assert out.usage.completion_tokens == 20


@pytest.mark.parametrize("make", [_greedy, _seeded], ids=["greedy", "seeded"])
def test_stream_concatenates_to_the_non_stream_text(client, qwen_server, make):
    full = make(client, qwen_server.model_name, max_tokens=40)
    stream = make(client, qwen_server.model_name, max_tokens=40, stream=True, stream_options={"include_usage": True})
    pieces, finish, usage, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            roles.append(c.delta.role)
            pieces.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(pieces) == full.choices[0].message.content
    assert len(full.choices[0].message.content) > 0
    assert roles[0] == "assistant"
    assert finish == full.choices[0].finish_reason
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (full.usage.prompt_tokens, full.usage.completion_tokens)


def test_stream_usage_reports_cached_tokens(client, qwen_server):
    """usage.prompt_tokens_details.cached_tokens is in the streamed usage chunk too: present on
    both requests, and the second, identical prompt is served from the prefix cache."""
    messages = [{"role": "user", "content": "Cache check: list three robots. " * 6}]
    usages = []
    for _ in range(2):
        stream = client.chat.completions.create(
            model=qwen_server.model_name,
            messages=messages,
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        usages.append([c.usage for c in stream if c.usage is not None])
    assert [len(u) for u in usages] == [1, 1]
    first, second = usages[0][0], usages[1][0]
    assert first.prompt_tokens_details is not None and isinstance(first.prompt_tokens_details.cached_tokens, int)
    assert second.prompt_tokens_details is not None and isinstance(second.prompt_tokens_details.cached_tokens, int)
    assert first.prompt_tokens_details.cached_tokens < second.prompt_tokens_details.cached_tokens
    assert second.prompt_tokens_details.cached_tokens <= second.prompt_tokens == first.prompt_tokens


def test_stream_without_include_usage_sends_no_usage(client, qwen_server):
    chunks = list(_greedy(client, qwen_server.model_name, max_tokens=5, stream=True))
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_length_finish_reason_and_max_completion_tokens(client, qwen_server):
    out = client.chat.completions.create(
        model=qwen_server.model_name,
        messages=HELLO,
        temperature=0,
        max_completion_tokens=3,
    )
    # the random-weight model practically never emits EOS within 3 tokens
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 3


def test_stop_sequence_truncates_and_reports_stop(client, qwen_server):
    text = _seeded(client, qwen_server.model_name, max_tokens=40).choices[0].message.content
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), "need a non-blank stop string from the model's own output"
    out = _seeded(client, qwen_server.model_name, max_tokens=40, stop=[stop])
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].message.content == text[: text.index(stop)]


def test_n_choices_non_stream_and_stream(client, qwen_server):
    out = client.chat.completions.create(
        model=qwen_server.model_name,
        messages=HELLO,
        n=3,
        max_tokens=8,
        temperature=1.0,
        seed=1,
    )
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert 3 <= out.usage.completion_tokens <= 24
    assert len({c.message.content for c in out.choices}) == 3  # seeded choices still differ
    stream = client.chat.completions.create(
        model=qwen_server.model_name,
        messages=HELLO,
        n=2,
        max_tokens=6,
        temperature=0,
        stream=True,
    )
    texts = {0: "", 1: ""}
    finished = set()
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1}
    assert texts[0] == texts[1] != ""  # greedy: both choices identical


def test_system_and_multi_turn_roles(client, qwen_server):
    out = client.chat.completions.create(
        model=qwen_server.model_name,
        max_tokens=4,
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "and?"},
        ],
    )
    assert out.usage.prompt_tokens > 10 and out.choices[0].message.content is not None


def test_seed_repeats_and_different_seeds_differ(client, qwen_server):
    a = _seeded(client, qwen_server.model_name, max_tokens=12).choices[0].message.content
    b = _seeded(client, qwen_server.model_name, max_tokens=12).choices[0].message.content
    c = (
        client.chat.completions.create(
            model=qwen_server.model_name, messages=HELLO, temperature=1.0, seed=99, max_tokens=12
        )
        .choices[0]
        .message.content
    )
    unseeded = {
        client.chat.completions.create(model=qwen_server.model_name, messages=HELLO, temperature=1.0, max_tokens=12)
        .choices[0]
        .message.content
        for _ in range(2)
    }
    assert a == b and a != c
    assert len(unseeded) == 2  # without a seed, sampling stays random

"""Prefill/decode disaggregation end to end on the tiny Qwen3: structserve's OpenAI API through
SGLang's gateway in PD mode, the KV moved prefill -> decode by Mooncake over TCP. Decode's greedy
output equals the aggregated server's (qwen_server: same model, dtype and settings), streamed and
not, on prompts that share a cached prefix on the prefill side (its early cached-prefix send)."""

from __future__ import annotations

import httpx
import openai
import pytest

pytestmark = pytest.mark.timeout(900)

SYSTEM = (
    "You are a terse assistant for a logistics company. Answer in one short sentence, name the "
    "warehouse and the day, and never ask a question back. Shipments leave from Rotterdam."
)
QUESTIONS = [
    "When does the next truck leave?",
    "Where is pallet 7?",
    "Can you ship glass?",
    "Is Monday possible?",
    "What is the cut-off time?",
    "Who signs the delivery note?",
    "How heavy can a parcel be?",
    "Do you ship to Oslo?",
    "Is there a weekend service?",
    "What does express cost?",
    "Which dock is free?",
]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def greedy(url: str, model: str, question: str, stream: bool = False) -> tuple[str, list[str], list[float]]:
    """The greedy answer's text, its tokens and their logprobs (these depend on every KV row the
    decode attends to: a wrong or missing transfer changes them even where the text does not)."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    kwargs = dict(model=model, messages=messages, max_tokens=12, temperature=0, logprobs=True)
    if not stream:
        out = client(url).chat.completions.create(**kwargs)
        content = out.choices[0].logprobs.content
        return out.choices[0].message.content or "", [t.token for t in content], [t.logprob for t in content]
    text, tokens, logprobs = "", [], []
    for chunk in client(url).chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            content = (choice.logprobs.content if choice.logprobs else None) or []
            tokens += [t.token for t in content]
            logprobs += [t.logprob for t in content]
    return text, tokens, logprobs


def assert_same(got: tuple[str, list[str], list[float]], expected: tuple[str, list[str], list[float]]) -> None:
    assert got[:2] == expected[:2]
    assert got[2] == pytest.approx(expected[2], abs=1e-3)


def test_decode_output_equals_the_aggregated_engine(pd, qwen_server) -> None:
    model = qwen_server.model_name
    for i, question in enumerate(QUESTIONS):
        expected = greedy(qwen_server.base_url, model, question)
        assert expected[1], "the reference produced no tokens"
        assert_same(greedy(pd.gateway.url, model, question), expected)
        if i % 3 == 0:  # streamed through the gateway too
            assert_same(greedy(pd.gateway.url, model, question, stream=True), expected)


def test_completions_through_the_gateway_equal_the_aggregated_engine(pd, qwen_server) -> None:
    model = qwen_server.model_name
    for prompt in ("The warehouse in Rotterdam", "Pallet 7 is in"):
        expected = client(qwen_server.base_url).completions.create(
            model=model, prompt=prompt, max_tokens=10, temperature=0
        )
        got = client(pd.gateway.url).completions.create(model=model, prompt=prompt, max_tokens=10, temperature=0)
        assert got.choices[0].text == expected.choices[0].text
        assert got.usage.completion_tokens == expected.usage.completion_tokens


def test_a_pd_replica_asked_directly_names_the_missing_field(pd, qwen_server) -> None:
    body = {"model": qwen_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(f"{pd.decode.base_url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "bootstrap_host"
    r = httpx.post(f"{qwen_server.base_url}/v1/chat/completions", json={**body, "bootstrap_room": 5}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "bootstrap_room", r.text

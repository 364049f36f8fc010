"""Every client mistake gets a 4xx OpenAI error envelope naming what to change; the
server keeps serving afterwards."""

from __future__ import annotations

import httpx
import pytest

LONG = "hello " * 5000  # > 4096 tokens: the tiny Qwen3's whole context


def body(qwen_server, **overrides):
    b = {"model": qwen_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    b.update(overrides)
    return {k: v for k, v in b.items() if v is not ...}


def fn(name, parameters=None):
    function = {"name": name} if parameters is None else {"name": name, "parameters": parameters}
    return {"type": "function", "function": function}


CASES = [
    # (id, overrides or raw bytes, status, param, words in message)
    ("unknown-model", {"model": "gpt-4o"}, 404, "model", "not served"),  # as OpenAI: 404 model_not_found
    ("empty-messages", {"messages": []}, 400, "messages", "at least one"),
    ("missing-messages", {"messages": ...}, 400, "messages", "required"),
    ("bad-role", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role", "user"),
    ("messages-not-a-list", {"messages": "hi"}, 400, "messages", "list"),
    ("max-tokens-zero", {"max_tokens": 0}, 400, "max_tokens", "at least 1"),
    ("max-tokens-negative", {"max_tokens": -1}, 400, "max_tokens", "at least 1"),
    (
        "max-completion-tokens-beyond-context",
        {"max_tokens": ..., "max_completion_tokens": 10**6},
        400,
        "max_completion_tokens",
        "at most",
    ),
    ("max-tokens-not-int", {"max_tokens": "many"}, 400, "max_tokens", "integer"),
    ("max-tokens-numeric-string", {"max_tokens": "4"}, 400, "max_tokens", "integer"),  # strict: no coercion
    ("stream-as-string", {"stream": "yes"}, 400, "stream", "boolean"),
    ("temperature-as-string", {"temperature": "0.5"}, 400, "temperature", "number"),
    (
        "returned-message-with-refusal",
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b", "refusal": "no"},
                {"role": "user", "content": "c"},
            ]
        },
        400,
        "messages.1.refusal",
        "only accepted as null",
    ),
    ("negative-temperature", {"temperature": -0.5}, 400, "temperature", "greater than or equal"),
    ("top-p-zero", {"top_p": 0}, 400, "top_p", "greater than"),
    ("n-too-large", {"n": 100}, 400, "n", "between 1 and"),
    ("n-zero", {"n": 0}, 400, "n", "between 1 and"),
    ("too-many-stops", {"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "at most 4"),
    ("unsupported-param", {"logit_bias": {"1": 5}}, 400, "logit_bias", "unsupported"),
    (
        "prompt-too-long",
        {"messages": [{"role": "user", "content": LONG}], "max_tokens": ...},
        400,
        "messages",
        "context",
    ),
    (
        "tool-without-id",
        {"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "r"}]},
        400,
        "messages.1.tool_call_id",
        "tool_call_id",
    ),
    (
        "tool-result-for-unknown-call",
        {"messages": [{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "call_x", "content": "r"}]},
        400,
        "messages.1.tool_call_id",
        "does not match",
    ),
    ("invalid-tool-name", {"tools": [fn("get weather!")]}, 400, "tools.0.function.name", "pattern"),
    ("tool-name-too-long", {"tools": [fn("x" * 65)]}, 400, "tools.0.function.name", "pattern"),
    ("parameters-not-an-object", {"tools": [fn("f", "string")]}, 400, "tools.0.function.parameters", "dictionary"),
    (
        "parameters-not-object-typed",
        {"tools": [fn("f", {"type": "array"})]},
        400,
        "tools.0.function.parameters",
        "type 'object'",
    ),
    (
        "parameters-bad-type",
        {"tools": [fn("f", {"type": "objekt"})]},
        400,
        "tools.0.function.parameters",
        "type 'object'",
    ),
    (
        "parameters-invalid-schema",
        {"tools": [fn("f", {"type": "object", "properties": {"a": {"type": "strin"}}})]},
        400,
        "tools.0.function.parameters",
        "schema",
    ),
    (
        "parameters-unsupported-keyword",
        {
            "tools": [
                fn("ok"),
                fn("f", {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}),
            ]
        },
        400,
        "tools.1.function.parameters",
        "uniqueItems",
    ),
    (
        "parameters-remote-ref",
        {"tools": [fn("f", {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}})]},
        400,
        "tools.0.function.parameters",
        "not local",
    ),
    (
        "parameters-bad-regex",
        {"tools": [fn("f", {"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-"}}})]},
        400,
        "tools.0.function.parameters",
        "regex",
    ),
    ("duplicate-tool-names", {"tools": [fn("f"), fn("f")]}, 400, "tools.1.function.name", "unique"),
    ("empty-tools", {"tools": []}, 400, "tools", "at least one tool"),
    (
        "tool-choice-unknown-tool",
        {"tools": [fn("f")], "tool_choice": {"type": "function", "function": {"name": "g"}}},
        400,
        "tool_choice.function.name",
        "not in 'tools'",
    ),
    (
        "allowed-tools-unknown-tool",
        {
            "tools": [fn("f")],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "g"}}]},
            },
        },
        400,
        "tool_choice.allowed_tools.tools.0.function.name",
        "not in 'tools'",
    ),
    ("tool-choice-without-tools", {"tool_choice": "required"}, 400, "tool_choice", "only allowed when 'tools'"),
    ("parallel-without-tools", {"parallel_tool_calls": False}, 400, "parallel_tool_calls", "only allowed"),
    ("tool-choice-bad-string", {"tools": [fn("f")], "tool_choice": "always"}, 400, "tool_choice", "allowed_tools"),
    (
        "tool-call-arguments-not-json",
        {
            "messages": [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}],
                },
            ]
        },
        400,
        "messages.1.tool_calls.0.function.arguments",
        "JSON object",
    ),
]


def assert_envelope(resp, status, param, words):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["code"]
    assert err["param"] == param
    assert words.lower() in err["message"].lower(), err["message"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_request_envelope(qwen_server, case):
    _, overrides, status, param, words = case
    resp = httpx.post(f"{qwen_server.base_url}/v1/chat/completions", json=body(qwen_server, **overrides), timeout=60)
    assert_envelope(resp, status, param, words)


@pytest.mark.parametrize("stream", [True, False])
def test_streamed_bad_request_is_a_plain_400(qwen_server, stream):
    resp = httpx.post(
        f"{qwen_server.base_url}/v1/chat/completions",
        json=body(qwen_server, max_tokens=10**6, stream=stream),
        timeout=60,
    )
    assert_envelope(resp, 400, "max_tokens", "at most")


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"'])
def test_malformed_bodies(qwen_server, raw):
    resp = httpx.post(
        f"{qwen_server.base_url}/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]


def test_unknown_route_and_method(qwen_server):
    r404 = httpx.get(f"{qwen_server.base_url}/v1/nothing-here", timeout=30)
    assert r404.status_code == 404 and r404.json()["error"]["message"]
    r405 = httpx.get(f"{qwen_server.base_url}/v1/chat/completions", timeout=30)
    assert r405.status_code == 405 and r405.json()["error"]["type"] == "invalid_request_error"
    unknown_model = httpx.get(f"{qwen_server.base_url}/v1/models/nope", timeout=30)
    assert unknown_model.status_code == 404 and unknown_model.json()["error"]["param"] == "model"
    assert unknown_model.json()["error"]["code"] == "model_not_found"


def test_server_still_serves_after_bad_input(qwen_server):
    for case in CASES[:5]:
        httpx.post(f"{qwen_server.base_url}/v1/chat/completions", json=body(qwen_server, **case[1]), timeout=60)
    ok = httpx.post(f"{qwen_server.base_url}/v1/chat/completions", json=body(qwen_server), timeout=60)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] is not None
    assert httpx.get(f"{qwen_server.base_url}/ready", timeout=10).status_code == 200

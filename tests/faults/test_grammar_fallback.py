"""A broken llguidance build: requests are served through xgrammar.

Its own server (the tiny Qwen3, float32, ``grammar.backend: llguidance``, the default) through
tests/broken_llguidance_serve.py, where the third-party ``llguidance`` cannot build a tokenizer
(as on a tokenizer it cannot read) and fails checking grammars that contain ``CHECK_FAILS``.
Tool calls and ``response_format`` schemas that would go to llguidance still get schema-valid
output, each fallback is counted on /metrics by reason and the log names it.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.broken_llguidance_serve import BUILD_FAILURE, CHECK_FAILS
from tests.server import ServerProcess

pytestmark = pytest.mark.timeout(600)
ANSWER = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "digit": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["ok", "digit"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def broken_server(assets):
    server = ServerProcess(
        assets.qwen3_tiny,
        "qwen-broken-llguidance",
        module="tests.broken_llguidance_serve",
        env={"STRUCTSERVE_DTYPE": "float32", "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false"},
    )
    server.start()
    yield server
    assert server.stop() == 0


def chat(server, **fields) -> dict:
    body = {"model": server.model_name, "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    reply = httpx.post(f"{server.base_url}/v1/chat/completions", json=body | fields, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]


def fallbacks(server) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    found = re.findall(r"^structserve_grammar_fallbacks_total\{([^}]*)\} (\S+)$", text, re.M)
    out = {}
    for labels, value in found:
        parsed = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        assert (parsed["from"], parsed["to"]) == ("llguidance", "xgrammar"), parsed
        out[parsed["reason"]] = float(value)
    return out


def test_response_format_is_served_by_xgrammar(broken_server):
    before = fallbacks(broken_server).get("build", 0)
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}
    choice = chat(broken_server, response_format=fmt, max_tokens=64, temperature=0)
    assert choice["finish_reason"] == "stop", choice
    Draft202012Validator(ANSWER).validate(json.loads(choice["message"]["content"]))
    assert choice["schema_validation"]["valid"] is True
    assert fallbacks(broken_server)["build"] == before + 1


def test_tool_calls_are_served_by_xgrammar(broken_server):
    before = fallbacks(broken_server).get("build", 0)
    choice = chat(broken_server, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_tokens=64)
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    Draft202012Validator(WEATHER["function"]["parameters"]).validate(json.loads(call["function"]["arguments"]))
    assert fallbacks(broken_server)["build"] == before + 1


def check_fails(server) -> dict:
    schema = {"type": "object", "properties": {CHECK_FAILS: {"type": "boolean"}}, "required": [CHECK_FAILS]}
    fmt = {"type": "json_schema", "json_schema": {"name": "flag", "schema": schema}}
    return chat(server, response_format=fmt, max_tokens=32, temperature=0)


def test_a_failed_llguidance_check_in_the_service_falls_back_too(broken_server):
    before = fallbacks(broken_server).get("check", 0)
    choice = check_fails(broken_server)
    assert choice["finish_reason"] == "stop" and choice["schema_validation"]["valid"] is True, choice
    assert fallbacks(broken_server)["check"] == before + 1


def test_the_log_names_the_reason(broken_server):
    chat(broken_server, tools=[WEATHER], tool_choice="auto", max_tokens=8)  # a grammar no other test sent
    check_fails(broken_server)
    log = broken_server.log_path.read_text(errors="replace")
    assert "llguidance could not be built for this tokenizer" in log and BUILD_FAILURE in log
    assert re.search(r"llguidance build failed \(build: RuntimeError: .*\); serving this \w+ with xgrammar", log)
    assert "llguidance failed checking a json_schema (RuntimeError: llguidance internal error" in log

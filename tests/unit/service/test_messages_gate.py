"""The real app (engine not loaded) with API keys: ``x-api-key`` authenticates exactly as
``Authorization: Bearer``; refusals on /v1/messages come in Anthropic's envelope, on chat in
OpenAI's."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from service.main import create_app
from service.settings import load_settings

BODY = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def client(monkeypatch) -> TestClient:
    monkeypatch.setenv("STRUCTSERVE_API_KEYS", "key-a")
    return TestClient(create_app(load_settings(), Path("/nonexistent-model"), "m"))  # no lifespan: not ready


def test_x_api_key_is_the_bearer_key(monkeypatch):
    c = client(monkeypatch)
    wrong = c.post("/v1/messages", json=BODY, headers={"x-api-key": "nope", "anthropic-version": "2023-06-01"})
    assert wrong.status_code == 401
    assert wrong.json()["type"] == "error" and wrong.json()["error"]["type"] == "authentication_error"
    for headers in ({"x-api-key": "key-a"}, {"Authorization": "Bearer key-a"}):
        past_the_key = c.post("/v1/messages", json=BODY, headers=headers)
        assert past_the_key.status_code == 503, past_the_key.text  # the key passed: the engine is not loaded
        assert past_the_key.json()["error"]["type"] == "overloaded_error"
    chat = c.post("/v1/chat/completions", json=BODY, headers={"x-api-key": "key-a"})
    assert chat.status_code == 503 and chat.json()["error"]["code"] is not None  # OpenAI's envelope there
    missing = c.post("/v1/messages", json=BODY)
    assert missing.status_code == 401 and "x-api-key" in missing.json()["error"]["message"]

"""The real FastAPI app before its engine is up (lifespan not started): health answers,
readiness and chat say 503 in the OpenAI envelope, client mistakes are still 400s."""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.settings import load_settings


@pytest.fixture()
def client():
    app = create_app(load_settings(), Path("/nonexistent-model"), "m")
    return TestClient(app)  # no `with`: the lifespan (engine start) does not run


def test_health_is_ok_while_loading(client):
    assert client.get("/health").json() == {"status": "ok"}


def test_ready_and_chat_are_503_while_loading(client):
    ready = client.get("/ready")
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
    chat = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert chat.status_code == 503
    assert "loading" in chat.json()["error"]["message"]


def test_models_lists_the_name_before_load(client):
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["m"]


def test_metrics_exposes_readiness(client):
    text = client.get("/metrics").text
    assert "structserve_ready 0.0" in text

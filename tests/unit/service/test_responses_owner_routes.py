"""The real app (engine not loaded) with two API keys: GET and DELETE /v1/responses/{id} look up
the caller's own entries only (the gate's owner id reaches the route); another key's id is the
same 404 as an unknown one; a store that cannot be reached is a 503, not a 500."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.routes.responses import STORE
from service.limits import KeyRing
from service.main import create_app
from service.settings import load_settings
from tests.server import free_port
from tests.unit.service.test_responses_store import response

KEYS = ("key-a", "key-b")


def app_with(monkeypatch, **env: str):
    monkeypatch.setenv("STRUCTSERVE_API_KEYS", ",".join(KEYS))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return create_app(load_settings(), Path("/nonexistent-model"), "m")


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture()
def stored(monkeypatch):
    app = app_with(monkeypatch)
    made, conversation = response()
    owner_a = KeyRing(KEYS).owner(0)
    asyncio.run(app.state.service.extra[STORE].put(owner_a, made, conversation))
    return TestClient(app), made  # no `with`: the lifespan (engine start) does not run


def test_only_the_creating_key_reads_or_deletes(stored):
    client, made = stored
    path = f"/v1/responses/{made.id}"
    theirs, unknown = client.get(path, headers=auth("key-b")), client.get("/v1/responses/resp_x", headers=auth("key-b"))
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["error"] == unknown.json()["error"] | {
        "message": unknown.json()["error"]["message"].replace("resp_x", made.id)
    }
    assert client.delete(path, headers=auth("key-b")).json() == theirs.json()
    mine = client.get(path, headers=auth("key-a"))
    assert mine.status_code == 200 and mine.json()["id"] == made.id
    assert client.delete(path, headers=auth("key-a")).json() == {"id": made.id, "object": "response", "deleted": True}
    assert client.get(path, headers=auth("key-a")).status_code == 404


def test_an_unreachable_store_is_a_503(monkeypatch):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    app = app_with(monkeypatch, STRUCTSERVE_RESPONSES__STORE="redis", STRUCTSERVE_RESPONSES__REDIS_URL=url)
    reply = TestClient(app).get("/v1/responses/resp_x", headers=auth("key-a"))
    assert reply.status_code == 503 and reply.headers["retry-after"] == "1"
    assert reply.json()["error"]["code"] == "store_unavailable", reply.json()


def test_a_response_too_large_to_store_says_store_false():
    from service.fronts.responses.keep import Keeper
    from service.responses_store import MemoryResponseStore

    store = MemoryResponseStore(ttl_s=60, max_entry_bytes=1024, max_total_bytes=1 << 20)
    small, small_conv = response("short")
    large, large_conv = response("x" * 2000)
    asyncio.run(Keeper(store, "o", small_conv[:1])(small))
    asyncio.run(Keeper(store, "o", large_conv[:1])(large))
    assert small.store is True and large.store is False

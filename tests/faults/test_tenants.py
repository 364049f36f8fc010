"""One tenant cannot reach another's stored responses (the default memory store): a response key A
stored with ``store: true`` is, for key B, exactly an unknown id: ``GET /v1/responses/{id}``,
``DELETE`` and ``previous_response_id`` all answer the 404 an unknown id gets, envelope for
envelope, while key A reads it and continues it."""

from __future__ import annotations

import httpx
import pytest

from tests.faults.conftest import KEY_A, KEY_B

pytestmark = pytest.mark.timeout(600)
UNKNOWN = "resp_0123456789abcdef0123456789abcdef"


def call(server, key: str, method: str, path: str, body: dict | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, f"{server.base_url}{path}", json=body, headers=headers, timeout=300)


def ask(server, key: str, **fields) -> httpx.Response:
    body = {"model": server.model_name, "input": "Say hi", "max_output_tokens": 4, "temperature": 0}
    return call(server, key, "POST", "/v1/responses", body | fields)


def envelope(reply: httpx.Response, response_id: str = UNKNOWN) -> dict:
    """Status and error envelope, ``response_id`` spelled as ``UNKNOWN`` (to compare with an unknown id's)."""
    assert "error" in reply.json(), f"{reply.status_code}: {reply.text[:300]}"  # a refusal, not the response
    error = reply.json()["error"]
    return {"status": reply.status_code, **error, "message": error["message"].replace(response_id, UNKNOWN)}


def test_another_keys_response_is_an_unknown_id(fault_server) -> None:
    created = ask(fault_server, KEY_A, store=True)
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    assert created.json()["store"] is True

    unknown_get = call(fault_server, KEY_B, "GET", f"/v1/responses/{UNKNOWN}")
    assert unknown_get.status_code == 404 and unknown_get.json()["error"]["code"] == "response_not_found"
    assert envelope(call(fault_server, KEY_B, "GET", f"/v1/responses/{rid}"), rid) == envelope(unknown_get)
    deleted = call(fault_server, KEY_B, "DELETE", f"/v1/responses/{rid}")
    assert envelope(deleted, rid) == envelope(unknown_get)

    unknown_prev = ask(fault_server, KEY_B, previous_response_id=UNKNOWN)
    assert unknown_prev.status_code == 404, unknown_prev.text
    assert unknown_prev.json()["error"]["param"] == "previous_response_id"
    theirs = ask(fault_server, KEY_B, previous_response_id=rid)
    assert envelope(theirs, rid) == envelope(unknown_prev)

    mine = call(fault_server, KEY_A, "GET", f"/v1/responses/{rid}")
    assert mine.status_code == 200 and mine.json() == created.json()  # key B's DELETE removed nothing
    follow_up = ask(fault_server, KEY_A, previous_response_id=rid)
    assert follow_up.status_code == 200, follow_up.text
    assert follow_up.json()["usage"]["input_tokens"] > created.json()["usage"]["input_tokens"]  # the history came along

"""One request whose activations go NaN fails alone: the C8-D store refuses its K/V rows
(stored as zeros, marked), the scheduler finishes that request with a 422 naming the fault, and
the 7 requests batched beside it complete; the server stays ready, its KV comes back and the pool
census balances. Streamed, the failure is an error event in the stream."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.api.test_disconnect import assert_pool_consistent, wait_for_kv
from tests.faults.conftest import KEY_A, POISON_TEXT

HEADERS = {"Authorization": f"Bearer {KEY_A}"}


def body(server, text: str, stream: bool = False) -> dict:
    return {
        "model": server.model_name,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": stream,
    }


def post(server, text: str) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body(server, text), headers=HEADERS, timeout=120)


def refused(server) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    return {
        what: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        for what in ("requests", "tokens")
        if line.startswith(f'structserve_kv_refused{{what="{what}"}}')
    }


def test_a_nan_request_fails_alone_among_eight_and_frees_its_kv(fault_server):
    before = refused(fault_server)
    prompts = [f"Write a short note about the number {i}." for i in range(8)]
    prompts[3] = f"Tell me about the{POISON_TEXT} in the park."
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda p: post(fault_server, p), prompts))
    bad = responses.pop(3)
    assert bad.status_code == 422, bad.text
    error = bad.json()["error"]
    assert error["code"] == "non_finite_activations" and "non-finite" in error["message"], error
    assert [r.status_code for r in responses] == [200] * 7, [r.text for r in responses]
    assert all(r.json()["choices"][0]["message"]["content"] for r in responses)
    after = refused(fault_server)
    assert after["requests"] == before.get("requests", 0) + 1 and after["tokens"] > before.get("tokens", 0)
    assert httpx.get(f"{fault_server.base_url}/ready", timeout=10).status_code == 200
    assert wait_for_kv(fault_server, lambda v: v == 0) == 0
    assert_pool_consistent(fault_server)


def test_a_streamed_nan_request_ends_with_an_error_event(fault_server):
    url = f"{fault_server.base_url}/v1/chat/completions"
    payload = body(fault_server, f"The{POISON_TEXT} again.", stream=True)
    with httpx.stream("POST", url, json=payload, headers=HEADERS, timeout=120) as resp:
        assert resp.status_code == 200  # the failure happens after the stream began (in the engine)
        frames = [line.removeprefix("data: ") for line in resp.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["code"] == "non_finite_activations", error
    assert post(fault_server, "Say hello.").status_code == 200  # and the server serves on
    assert wait_for_kv(fault_server, lambda v: v == 0) == 0
    assert_pool_consistent(fault_server)


def test_the_same_prompt_fails_again_and_the_pool_balances(fault_server):
    """No zeroed row answers a later request: the prefix tree does not keep a failed request's rows,
    and a marked row still held anywhere fails whoever reads it."""
    text = f"Once more, the{POISON_TEXT} story."
    assert post(fault_server, text).status_code == 422
    assert post(fault_server, text).status_code == 422
    assert wait_for_kv(fault_server, lambda v: v == 0) == 0
    assert_pool_consistent(fault_server)

"""A client that goes away aborts its engine request: KV pages return to the idle
baseline (read from /metrics, which asks the scheduler), and the pool census balances: every
slot free or in the prefix tree, no tree lock left, no page both cached and free, no double free.

Each test first proves the engine request existed and held KV while the client was still
connected (scraped in a tight loop: ``structserve_kv_used_tokens`` or the census'
``held_by_requests``), so a disconnect that happened before any engine request cannot pass."""

from __future__ import annotations

import re
import threading
import time

import httpx

KV_RE = re.compile(r"^structserve_kv_used_tokens ([0-9.e+]+)$", re.M)
CENSUS_RE = re.compile(r'^structserve_kv_pool_census\{part="(\w+)"\} ([0-9.e+]+)$', re.M)
LONG_PROMPT_WORDS = 3000  # "word " is one token: a ~1 s prefill of > 3000 tokens on this CPU


def assert_pool_consistent(server) -> dict:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    census = {part: int(float(value)) for part, value in CENSUS_RE.findall(text)}
    assert census["free"] + census["tree_evictable"] == census["total"], census
    assert census["tree_protected"] == census["held_by_requests"] == 0, census
    assert census["tree_pages_free"] == census["duplicate_free_pages"] == 0, census
    return census


def kv_used(server) -> int:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    return int(float(KV_RE.search(text).group(1)))


def wait_for_kv(server, predicate, timeout=30.0) -> int:
    deadline = time.monotonic() + timeout
    value = kv_used(server)
    while not predicate(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = kv_used(server)
    return value


def kv_held(server) -> int:
    """KV tokens held by requests now: the scheduler's used tokens, or (right after a prefill,
    before the first decode step is counted there) the census' slots held by requests."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    census = {part: int(float(value)) for part, value in CENSUS_RE.findall(text)}
    return max(int(float(KV_RE.search(text).group(1))), census.get("held_by_requests", 0))


def wait_until_held(server, connected, at_least: int = 1, timeout=30.0) -> int:
    """Scrape in a tight loop until requests hold ``at_least`` KV tokens (a chunked prefill holds
    its prompt a chunk at a time); the most seen (0 if none) once ``connected()`` turns false."""
    deadline = time.monotonic() + timeout
    most = 0
    while connected() and time.monotonic() < deadline:
        most = max(most, kv_held(server))
        if most >= at_least:
            break
    return most


def long_request(server, stream: bool, prompt: str = "Tell me everything.") -> dict:
    return {
        "model": server.model_name,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 3000,
        "temperature": 0,
        "stream": stream,
    }


def test_disconnect_mid_decode_frees_kv(qwen_server):
    baseline = wait_for_kv(qwen_server, lambda v: v == 0)
    assert baseline == 0
    with httpx.Client(timeout=60) as client:
        with client.stream(
            "POST", f"{qwen_server.base_url}/v1/chat/completions", json=long_request(qwen_server, True)
        ) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            content_chunks = 0
            for line in lines:
                if '"content":"' in line and '"content":""' not in line:
                    content_chunks += 1
                if content_chunks >= 5:
                    break
            held = kv_used(qwen_server)
            assert held > 0, "the running request should hold KV pages"
    # response closed mid-stream: the engine request must be aborted
    assert wait_for_kv(qwen_server, lambda v: v == baseline) == baseline
    assert_pool_consistent(qwen_server)


def test_disconnect_mid_prefill_frees_kv(qwen_server):
    """Disconnect as soon as the long prompt's KV is held, before any content was read: the
    role chunk alone proves nothing (it is sent before the engine request exists)."""
    assert wait_for_kv(qwen_server, lambda v: v == 0) == 0
    body = long_request(qwen_server, True, "word " * LONG_PROMPT_WORDS) | {"max_tokens": 1000}
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{qwen_server.base_url}/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            assert '"role":"assistant"' in next(lines)
            held = wait_until_held(qwen_server, connected=lambda: True, at_least=LONG_PROMPT_WORDS)
            assert held >= LONG_PROMPT_WORDS, f"the prompt's KV was not held before the disconnect (saw {held})"
    assert wait_for_kv(qwen_server, lambda v: v == 0) == 0
    assert_pool_consistent(qwen_server)


def test_non_stream_client_timeout_aborts(qwen_server):
    assert wait_for_kv(qwen_server, lambda v: v == 0) == 0
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            httpx.post(
                f"{qwen_server.base_url}/v1/chat/completions", json=long_request(qwen_server, False), timeout=2.0
            )
        except BaseException as exc:  # noqa: BLE001 -- inspected below
            outcome.append(exc)

    client = threading.Thread(target=call)
    client.start()
    held = wait_until_held(qwen_server, connected=client.is_alive)
    still_connected = client.is_alive()
    client.join()
    assert held > 0 and still_connected, f"no KV held while the client waited (saw {held})"
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.ReadTimeout), outcome
    assert wait_for_kv(qwen_server, lambda v: v == 0) == 0
    assert_pool_consistent(qwen_server)
    # and the server is fine
    ok = httpx.post(
        f"{qwen_server.base_url}/v1/chat/completions",
        json=long_request(qwen_server, False) | {"max_tokens": 3},
        timeout=60,
    )
    assert ok.status_code == 200

"""A client that goes away aborts its engine request: KV pages return to the idle
baseline (read from /metrics, which asks the scheduler), and the pool census balances: every
slot free or in the prefix tree, no tree lock left, no page both cached and free, no double free."""

from __future__ import annotations

import re
import time

import httpx
import pytest

KV_RE = re.compile(r"^structserve_kv_used_tokens ([0-9.e+]+)$", re.M)
CENSUS_RE = re.compile(r'^structserve_kv_pool_census\{part="(\w+)"\} ([0-9.e+]+)$', re.M)


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


def long_request(server, stream: bool, prompt: str = "Tell me everything.") -> dict:
    return {
        "model": server.model_name, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 3000, "temperature": 0, "stream": stream,
    }


def test_disconnect_mid_decode_frees_kv(qwen_server):
    baseline = wait_for_kv(qwen_server, lambda v: v == 0)
    assert baseline == 0
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{qwen_server.base_url}/v1/chat/completions", json=long_request(qwen_server, True)) as resp:
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
    prompt = "word " * 3000  # a long prefill
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{qwen_server.base_url}/v1/chat/completions",
                           json=long_request(qwen_server, True, prompt) | {"max_tokens": 1000}) as resp:
            assert resp.status_code == 200
            next(resp.iter_lines())  # the role chunk: the engine is prefilling now
    assert wait_for_kv(qwen_server, lambda v: v == 0) == 0
    assert_pool_consistent(qwen_server)


def test_non_stream_client_timeout_aborts(qwen_server):
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{qwen_server.base_url}/v1/chat/completions", json=long_request(qwen_server, False), timeout=2.0)
    assert wait_for_kv(qwen_server, lambda v: v == 0) == 0
    # and the server is fine
    ok = httpx.post(f"{qwen_server.base_url}/v1/chat/completions",
                    json=long_request(qwen_server, False) | {"max_tokens": 3}, timeout=60)
    assert ok.status_code == 200

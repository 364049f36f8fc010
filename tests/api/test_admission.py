"""Admission into a small KV pool (1,024 tokens, 64 pages of 16) on the real engine (tiny Qwen3,
which always generates to max_tokens): the same overload makes SGLang's optimistic admission
retract running requests, while ``scheduling.admission: budget`` never does and still serves
every request in full. A request the pool can never hold (SGLang would shorten its max_tokens
silently) is a 400 naming max_tokens and the largest value that fits, and that value is served
in full."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.api.test_kv_c8_aborts import scrape
from tests.server import ServerProcess

POOL_TOKENS, PAGE, CHUNK = 1024, 16, 64
LOAD = 14  # concurrent requests of MAX_TOKENS: ~3.5 pools of worst-case KV
MAX_TOKENS = 220


def server_for(assets, policy: str) -> ServerProcess:
    return ServerProcess(
        assets.qwen3_tiny,
        f"admission-{policy}",
        env={
            "STRUCTSERVE_DTYPE": "float32",
            "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false",
            "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(POOL_TOKENS),
            "STRUCTSERVE_ENGINE__PAGE_SIZE": str(PAGE),
            "STRUCTSERVE_SCHEDULING__ADMISSION": policy,
            "STRUCTSERVE_ENGINE__CHUNKED_PREFILL_SIZE": str(CHUNK),  # long prompts arrive in chunks
        },
    )


@pytest.fixture(scope="module")
def servers(assets):
    """Both policies' servers, started side by side (an engine start waits on imports and I/O)."""
    started = {policy: server_for(assets, policy) for policy in ("budget", "sglang")}
    try:
        for server in started.values():
            server.launch()
        for server in started.values():
            server.wait_ready()
        yield started
    finally:
        for server in started.values():
            server.stop()


def chat(server: ServerProcess, text: str, max_tokens: int) -> httpx.Response:
    body = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=600)


def overload(server: ServerProcess) -> list[httpx.Response]:
    with ThreadPoolExecutor(LOAD) as pool:
        return list(pool.map(lambda i: chat(server, f"Tell story number {i}.", MAX_TOKENS), range(LOAD)))


def stat(metrics: dict, name: str) -> float:
    return metrics[("structserve_scheduler", (("stat", name),))]


def pages(metrics: dict, state: str) -> float:
    return metrics[("structserve_kv_pages", (("state", state),))]


def idle(server: ServerProcess, timeout: float = 30) -> dict:
    """The metrics once the scheduler holds no request: no page reserved, used or outstanding."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(server)
        held = [pages(metrics, state) for state in ("reserved", "used", "outstanding")]
        if held == [0, 0, 0] or time.monotonic() > deadline:
            assert held == [0, 0, 0], held
            return metrics
        time.sleep(0.2)


def test_budget_never_retracts_where_sglang_does(servers):
    for policy, server in servers.items():
        responses = overload(server)
        assert [r.status_code for r in responses] == [200] * LOAD, [r.text for r in responses if r.status_code != 200]
        assert {r.json()["usage"]["completion_tokens"] for r in responses} == {MAX_TOKENS}
        metrics = idle(server)
        assert metrics[("structserve_admission_policy", (("policy", policy),))] == 1
        assert pages(metrics, "pool") == POOL_TOKENS // PAGE
        assert metrics[("structserve_scheduler_queue_seconds_count", ())] >= LOAD
        print(f"\n{policy}: " + ", ".join(f"{s}={stat(metrics, s):g}" for s in ("retractions", "budget_holds")))
    budget, sglang = scrape(servers["budget"]), scrape(servers["sglang"])
    assert stat(sglang, "retractions") > 0 and stat(sglang, "recomputed_tokens") > 0  # the load does overflow
    assert stat(budget, "retractions") == 0 and stat(budget, "retracted_tokens") == 0
    assert stat(budget, "budget_holds") > 0  # the budget held requests back instead
    assert stat(sglang, "budget_holds") == 0


@pytest.mark.parametrize("policy", ["budget", "sglang"])
def test_a_request_the_pool_can_never_hold_is_a_400_naming_the_largest_max_tokens(servers, policy):
    server = servers[policy]
    too_long = chat(server, "Hello.", POOL_TOKENS)
    assert too_long.status_code == 400, too_long.text
    error = too_long.json()["error"]
    assert error["param"] == "max_tokens" and "KV pool" in error["message"]
    largest = int(error["message"].split("at most ")[1].split()[0])
    prompt = int(error["message"].split("the prompt is ")[1].split()[0])
    assert largest == POOL_TOKENS - -(-prompt // PAGE) * PAGE - PAGE - 1  # what SGLang would clip to silently
    assert chat(server, "Hello.", largest + 1).status_code == 400
    served = chat(server, "Hello.", largest)  # the largest that fits is admitted (not left waiting)
    assert served.status_code == 200 and served.json()["usage"]["completion_tokens"] == largest


def test_n_choices_share_one_prefilled_prompt_and_usage_stays_honest(servers):
    """n = 4: the prompt is prefilled once (in 64-token chunks), then every choice matches it in
    the prefix cache (so the budget counts it once); usage still says none of it was cached."""
    server = servers["budget"]
    before = stat(scrape(server), "reused_tokens")
    body = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": "shared prompt " * 60}],
        "max_tokens": 8,
        "n": 4,
        "temperature": 1.0,
    }
    resp = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200 and len(resp.json()["choices"]) == 4
    usage = resp.json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0  # a fresh prompt: nothing was cached
    reused = stat(scrape(server), "reused_tokens") - before
    whole_pages = usage["prompt_tokens"] // PAGE * PAGE
    assert reused >= 4 * (whole_pages - PAGE), (reused, usage)  # each choice reused the prompt's pages

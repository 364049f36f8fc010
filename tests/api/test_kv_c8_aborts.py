"""The INT8 KV cache (C8-S + INT4 residuals) through the whole service: 100 aborted
requests (mid-prefill and mid-decode, plain and thinking) leave no quantized page and no
residual slot behind, no budget reservation (admission: budget), and it still serves. The pool was sized from a byte budget; the
combined-block prefix cache stays consistent through the aborts (KV used back to 0)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import C8_BUDGET
from tests.api.test_disconnect import assert_pool_consistent, kv_used, wait_for_kv


def scrape(server) -> dict:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def abort_one(server, i: int) -> bool:
    body = {
        "model": server.model_name,
        "max_tokens": 2000,
        "temperature": 1.0,
        "seed": i,
        "stream": True,
        "messages": [{"role": "user", "content": ("word " * (400 if i % 3 == 0 else 5)) + str(i)}],
    }
    if i % 4 == 1:
        body |= {"enable_thinking": True, "max_reasoning_tokens": 40}  # abort in either phase
    with httpx.Client(timeout=120) as client:
        with client.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            for n, _line in enumerate(resp.iter_lines()):
                if n >= 1 + i % 7:  # leave after 0-6 deltas: some mid-prefill, most mid-decode
                    return True
    return False


def test_100_aborts_leave_no_kv_pages(c8_server):
    assert wait_for_kv(c8_server, lambda v: v == 0) == 0
    with ThreadPoolExecutor(10) as pool:
        aborted = list(pool.map(lambda i: abort_one(c8_server, i), range(100)))
    assert all(aborted)
    assert wait_for_kv(c8_server, lambda v: v == 0, timeout=60) == 0, f"leaked: {kv_used(c8_server)} tokens"
    census = assert_pool_consistent(c8_server)  # the prefix tree and the pool agree after the aborts
    assert census["tree_evictable"] > 0  # the tree kept the prompts' pages
    idle = scrape(c8_server)  # budget admission: every aborted request's reservation was released
    assert idle[("structserve_admission_policy", (("policy", "budget"),))] == 1
    for state in ("reserved", "used", "outstanding"):
        assert idle[("structserve_kv_pages", (("state", state),))] == 0, state
    assert idle[("structserve_scheduler", (("stat", "waiting_requests"),))] == 0
    ok = httpx.post(
        f"{c8_server.base_url}/v1/chat/completions",
        timeout=60,
        json={"model": c8_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
    )
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
    metrics = scrape(c8_server)
    assert metrics[("structserve_kv_cache_method", (("method", "c8_static_residual"),))] == 1  # the scheduler's pool
    residual = {
        stat: metrics[("structserve_kv_residual", (("stat", stat),))]
        for stat in ("outlier_rate", "slots_used", "slots", "dropped", "slots_on_free_pages")
    }
    print(f"\nresidual side buffer after 100 aborts: {residual}")
    assert residual["slots_used"] > 0, "no outlier ever stored: the residual path was not exercised"
    assert residual["slots_on_free_pages"] == 0, "residual slots still held by freed pages"
    # the weights: every linear module W8A8 but the one kept in high precision (2 layers x 4 modules)
    assert metrics[("structserve_quantized_linear_layers", (("state", "quantized"),))] == 7
    assert metrics[("structserve_quantized_linear_layers", (("state", "kept"),))] == 1
    # the combined-block prefix cache served the repeated prompt prefixes, in whole 64-token units
    hits = metrics[("structserve_prefix_cache", (("stat", "hit_tokens"),))]
    assert hits > 0 and hits % 64 == 0
    # the byte budget: the pool as allocated (plus SGLang's one padding page, 0.1 %) fills it
    pool_bytes = metrics[("structserve_kv_pool_bytes", ())]
    assert C8_BUDGET * 0.9 <= pool_bytes <= C8_BUDGET * 1.01, (pool_bytes, C8_BUDGET)

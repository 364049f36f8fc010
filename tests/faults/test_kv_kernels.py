"""The live server's C8-D KV stores and reads run in the compiled library, counted where they ran:
``/metrics`` says which build the scheduler loaded and why (``structserve_kv_kernels_reason``), and
a request's calls add to ``structserve_kv_kernel_calls{impl="native"}`` with none falling back to
the torch reference (float32, contiguous pool rows: every call fits the library)."""

from __future__ import annotations

import httpx

from tests.faults.conftest import KEY_A


def kernel_metrics(server) -> tuple[dict[str, float], str]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    calls = {
        impl: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        for impl in ("native", "reference")
        if line.startswith(f'structserve_kv_kernel_calls{{impl="{impl}"}}')
    }
    return calls, text


def test_a_requests_kv_calls_run_compiled_and_are_counted(fault_server):
    before, _ = kernel_metrics(fault_server)
    response = httpx.post(
        f"{fault_server.base_url}/v1/chat/completions",
        json={
            "model": fault_server.model_name,
            "messages": [{"role": "user", "content": "Count from one to five."}],
            "max_tokens": 8,
            "temperature": 0,
        },
        headers={"Authorization": f"Bearer {KEY_A}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    after, text = kernel_metrics(fault_server)
    assert 'structserve_kv_kernels{impl="native"} 1.0' in text
    assert 'structserve_kv_kernels_reason{reason="compiled for this CPU"} 1.0' in text
    # every layer stores and reads K and V at each step: well over one call per generated token
    assert after["native"] - before.get("native", 0) >= 8, (before, after)
    assert after["reference"] == 0, after

"""Our SGLang plugin runs inside SGLang's scheduler process (an observable effect)."""

from __future__ import annotations

import re

import httpx
import psutil

from tests import cpu_flags

PLUGIN_RE = re.compile(
    r'^structserve_runtime_ext_loaded\{dp_rank="0",scheduler_pid="(\d+)",version="([^"]+)"\} 1\.0$', re.M
)

KV_SERVING_RE = re.compile(
    r'^structserve_kv_serving\{attention_backend="([^"]+)",pool_class="(\w+)",store_dtype="(\w+)"\} 1\.0$', re.M
)


def test_plugin_reports_from_the_scheduler_process(qwen_server):
    text = httpx.get(f"{qwen_server.base_url}/metrics", timeout=30).text
    match = PLUGIN_RE.search(text)
    assert match, text
    pid = int(match.group(1))
    server = psutil.Process(qwen_server.proc.pid)
    children = {c.pid for c in server.children(recursive=True)}
    assert pid != server.pid and pid in children
    # the process SGLang names its scheduler
    assert (
        "scheduler" in " ".join(psutil.Process(pid).cmdline()).lower()
        or "scheduler" in psutil.Process(pid).name().lower()
    )
    assert 'structserve_kv_cache_method{method="unquantized"} 1.0' in text  # kv_cache: bf16 builds SGLang's own pool
    # what serves K/V, read from the scheduler's live pool and model runner (docs/npu-twin.md)
    serving = KV_SERVING_RE.findall(text)
    assert serving == [("StructserveNativeAttnBackend", "MHATokenToKVPool", "float32")], serving


ATTENTION_RE = re.compile(r'^structserve_attention_decode_calls\{impl="(\w+)",path="(\w+)"\} (\d+)\.0$', re.M)
TINY_QWEN_LAYERS = 2


def test_decode_runs_batched_attention_in_the_scheduler(qwen_server):
    """Decoded answers go through runtime_ext's batched decode (one attention call per layer per
    step), never the per-request loop, as the scheduler's own counters report."""

    def calls() -> dict[str, int]:
        found = ATTENTION_RE.findall(httpx.get(f"{qwen_server.base_url}/metrics", timeout=30).text)
        assert {impl for impl, _, _ in found} == {"structserve"}, found
        return {path: int(n) for _, path, n in found}

    before = calls()
    body = {"model": qwen_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    replies = [httpx.post(f"{qwen_server.base_url}/v1/chat/completions", json=body, timeout=120) for _ in range(3)]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    decode_steps = sum(r.json()["usage"]["completion_tokens"] - 1 for r in replies)  # the 1st token is prefill's
    assert decode_steps > 0
    after = calls()
    assert set(after) == {"batched", "per_request"}, after
    assert after["batched"] - before["batched"] >= TINY_QWEN_LAYERS * decode_steps, (before, after, decode_steps)
    assert after["per_request"] == 0, after


KERNEL_CALLS_RE = re.compile(r'^structserve_decode_kernel_calls\{impl="(\w+)",kernel="(\w+)"\} (\d+)\.0$', re.M)
SMOLLM2_LAYERS = 30


def test_bf16_decode_runs_the_compiled_linear_and_attention_kernels(smol_server):
    """SmolLM2 in bfloat16: every decode step's linear layers (4 per layer + lm_head, one row each),
    attention (one call per layer), RMSNorm (2 per layer + the final one) and RoPE (1 per layer) run
    runtime_ext's compiled loops, none falls back to torch, and /metrics says which build loaded
    (docs/benchmarks.md, "Decode kernels"). On a CPU without AVX-512 / AVX512-BF16 the kernels
    built for them must run torch's instead, every call, and /metrics must say why."""

    def calls() -> tuple[dict[tuple[str, str], int], str]:
        text = httpx.get(f"{smol_server.base_url}/metrics", timeout=30).text
        return {(kernel, impl): int(n) for impl, kernel, n in KERNEL_CALLS_RE.findall(text)}, text

    before, _ = calls()
    body = {
        "model": smol_server.model_name,
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    reply = httpx.post(f"{smol_server.base_url}/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    decode_steps = reply.json()["usage"]["completion_tokens"] - 1
    assert decode_steps > 0
    after, text = calls()
    built = {
        "linear": cpu_flags.has("avx512f", "avx512_bf16"),
        "attention": cpu_flags.has("avx512f"),
        "norm_rope": True,
    }
    for kernel, ok in built.items():  # a CPU without what a kernel is built for runs torch's and says why
        impl, reason = ("native", "compiled for this CPU") if ok else ("reference", "built without")
        assert f'structserve_decode_kernels{{impl="{impl}",kernel="{kernel}",reason="{reason}' in text, text
    grew = {key: after[key] - before.get(key, 0) for key in after}
    per_step = {"linear": 4 * SMOLLM2_LAYERS + 1, "attention": SMOLLM2_LAYERS, "norm_rope": 3 * SMOLLM2_LAYERS + 1}
    for kernel, calls_per_step in per_step.items():  # norm_rope: 2 norms + RoPE per layer, and the final norm
        ran, other = ("native", "reference") if built[kernel] else ("reference", "native")
        assert grew.get((kernel, ran), 0) >= calls_per_step * decode_steps, (kernel, grew)
        assert after.get((kernel, other), 0) == 0, (kernel, after)


def test_sampled_decode_draws_through_the_compiled_seeded_sampler(smol_server):
    """A sampled request (temperature 0.8, OpenAI's ``seed``) draws every token through runtime_ext's
    compiled seeded sampler, none through SGLang's torch one, and the same seed repeats its text."""

    def calls() -> dict[str, int]:
        text = httpx.get(f"{smol_server.base_url}/metrics", timeout=30).text
        return {impl: int(n) for impl, kernel, n in KERNEL_CALLS_RE.findall(text) if kernel == "sampling"}

    before = calls()
    body = {
        "model": smol_server.model_name,
        "messages": [{"role": "user", "content": "Write a line about the sea."}],
        "max_tokens": 12,
        "temperature": 0.8,
        "seed": 1234,
    }
    replies = [httpx.post(f"{smol_server.base_url}/v1/chat/completions", json=body, timeout=300) for _ in range(2)]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    texts = [r.json()["choices"][0]["message"]["content"] for r in replies]
    assert texts[0] == texts[1], texts
    tokens = sum(r.json()["usage"]["completion_tokens"] for r in replies)
    after = calls()
    assert after.get("native", 0) - before.get("native", 0) >= tokens, (before, after, tokens)
    assert after.get("reference", 0) == 0, after

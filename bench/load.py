"""Load: N concurrent streaming clients against a real ``structserve serve`` process.

Each client loops for ``--duration`` seconds: a streaming chat completion (16-96 new tokens);
``--disconnect`` of them (30 %) hang up after 1-4 chunks. Afterwards the KV pool must be back
at its idle baseline with the pool census balanced. Printed: requests completed / cut by the
client / failed, TTFT and end-to-end p50/p99, tokens per second. Exit 1 on any failure.

    .venv/bin/python bench/load.py                     # SmolLM2, 64 clients, 2 minutes
    .venv/bin/python bench/load.py --model qwen3-tiny --duration 20 --clients 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
QUESTIONS = [
    "What is the capital of France?",
    "Name three colours.",
    "Write a haiku about rain.",
    "Explain what a cache is.",
    "Count from one to ten.",
    "Why is the sky blue?",
]


async def one(client: httpx.AsyncClient, url: str, model: str, rng: random.Random, hang_up: bool) -> dict:
    body = {
        "model": model,
        "stream": True,
        "max_tokens": rng.randrange(16, 96),
        "temperature": 0.7,
        "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}],
    }
    start, first, chunks, finish = time.perf_counter(), None, 0, None
    leave_after = rng.randrange(1, 5)
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code != 200:
            return {"outcome": "failed", "why": f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"}
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                first, chunks = first or time.perf_counter(), chunks + 1
            finish = choice.get("finish_reason") or finish
            if hang_up and chunks >= leave_after:
                return {"outcome": "cut"}
    if finish is None:
        return {"outcome": "failed", "why": "stream ended without a finish_reason"}
    end = time.perf_counter()
    return {"outcome": "done", "ttft": (first or end) - start, "e2e": end - start, "chunks": chunks}


async def client_loop(i: int, url: str, model: str, until: float, share: float, out: list) -> None:
    rng = random.Random(i)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        while time.monotonic() < until:
            try:
                out.append(await one(client, url, model, rng, rng.random() < share))
            except httpx.HTTPError as exc:
                out.append({"outcome": "failed", "why": f"{type(exc).__name__}: {exc}"})


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values or [float("nan")])[0]


def report(results: list[dict], elapsed: float, census: dict, kv_after: int, args: argparse.Namespace) -> bool:
    done = [r for r in results if r["outcome"] == "done"]
    failed = [r for r in results if r["outcome"] == "failed"]
    table = Table(
        title=f"{args.clients} streaming clients for {args.duration:.0f} s on {args.model}, "
        f"{args.disconnect:.0%} hanging up mid-stream"
    )
    for col in (
        "completed",
        "cut by client",
        "failed",
        "TTFT p50 (s)",
        "TTFT p99 (s)",
        "e2e p50 (s)",
        "e2e p99 (s)",
        "chunks/s",
        "KV after (tokens)",
    ):
        table.add_column(col, justify="right")
    ttft, e2e = [r["ttft"] for r in done], [r["e2e"] for r in done]
    table.add_row(
        str(len(done)),
        str(sum(r["outcome"] == "cut" for r in results)),
        str(len(failed)),
        f"{pct(ttft, 50):.2f}",
        f"{pct(ttft, 99):.2f}",
        f"{pct(e2e, 50):.2f}",
        f"{pct(e2e, 99):.2f}",
        f"{sum(r['chunks'] for r in done) / elapsed:.1f}",
        str(kv_after),
    )
    Console(width=180).print(table)
    print("pool census after:", census)
    for r in failed[:5]:
        print("failure:", r["why"])
    balanced = census.get("held_by_requests") == 0 and census.get("tree_protected") == 0
    return not failed and kv_after == 0 and balanced and bool(done)


async def drive(args: argparse.Namespace, server) -> tuple[list[dict], float]:
    url, until, out = f"{server.base_url}/v1/chat/completions", time.monotonic() + args.duration, []
    start = time.perf_counter()
    await asyncio.gather(
        *(client_loop(i, url, server.model_name, until, args.disconnect, out) for i in range(args.clients))
    )
    return out, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "qwen3-tiny"])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--disconnect", type=float, default=0.3)
    args = parser.parse_args()
    from assets import fetch
    from tests.api.test_disconnect import CENSUS_RE, kv_used, wait_for_kv
    from tests.server import ServerProcess

    model = getattr(fetch([args.model]), args.model.replace("-", "_"))
    server = ServerProcess(
        model,
        "load",
        env={
            "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": str(args.clients),
            "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": "32768",
        },
    )
    server.start()
    try:
        baseline = kv_used(server)
        results, elapsed = asyncio.run(drive(args, server))
        kv_after = wait_for_kv(server, lambda v: v == baseline, timeout=60)
        text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
        census = {part: int(float(v)) for part, v in CENSUS_RE.findall(text)}
        ok = report(results, elapsed, census, kv_after, args)
    finally:
        code = server.stop()
    print(f"server exit code after SIGTERM: {code}")
    return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

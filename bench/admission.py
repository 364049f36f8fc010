"""Admission under KV pressure: SGLang's optimistic admission vs the budget, on the
same request stream against a real ``structserve serve`` (SmolLM2, greedy, streaming).

The stream: ``--requests`` chat requests arriving as a Poisson process (``--rate`` per second),
``max_tokens`` log-uniform in 64..1024, questions that SmolLM2 answers in a sentence or in a
long essay (so many requests stop long before their ``max_tokens``). The KV pool is small
(``--pool`` tokens) so that SGLang's estimate (``new_token_ratio`` of each running request's
remaining ``max_tokens``) over-admits and has to retract. Per policy: retractions and
recomputed tokens, output tokens/s, TTFT and end-to-end p50/p99, mean pool utilisation (KV
held by requests / pool, sampled every 0.5 s), reserved vs used pages, time from the
scheduler's queue to first admission. Writes ``docs/img/admission_pool.png`` (pool use over time).

    .venv/bin/python bench/admission.py                        # ~17 min: sglang, budget, budget@0.5
    .venv/bin/python bench/admission.py --policies budget,sglang --requests 24
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHORT = ["What is the capital of France?", "Name a colour.", "What is 2 + 2?", "Say hello in Spanish."]
LONG = [
    "Write a long, detailed essay about the history of the Roman Empire.",
    "Explain in detail how a car engine works, step by step.",
    "Write a long story about a dragon who learns to read.",
    "Describe the water cycle in great detail, with examples.",
]


def stream_of_requests(n: int, rate: float, seed: int, long_share: float) -> list[dict]:
    rng, at, out = random.Random(seed), 0.0, []
    for _ in range(n):
        at += rng.expovariate(rate)
        question = rng.choice(LONG if rng.random() < long_share else SHORT)
        max_tokens = int(math.exp(rng.uniform(math.log(64), math.log(1024))))
        out.append({"at": at, "question": question, "max_tokens": max_tokens})
    return out


async def one(client: httpx.AsyncClient, url: str, model: str, req: dict, t0: float) -> dict:
    await asyncio.sleep(max(0.0, t0 + req["at"] - time.perf_counter()))
    body = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": req["max_tokens"],
        "temperature": 0,
        "messages": [{"role": "user", "content": req["question"]}],
    }
    start, first, usage = time.perf_counter(), None, None
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code != 200:
            return {"ok": False, "why": f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"}
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                first = time.perf_counter()
    end = time.perf_counter()
    hit_max = usage is not None and usage["completion_tokens"] >= req["max_tokens"]
    return {
        "ok": usage is not None,
        "ttft": (first or end) - start,
        "e2e": end - start,
        "usage": usage,
        "hit_max": hit_max,
    }


def parse_metrics(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(base_url: str) -> dict:
    return parse_metrics(httpx.get(f"{base_url}/metrics", timeout=30).text)


def pool_sample(metrics: dict) -> dict:
    census = {k[1][0][1]: v for k, v in metrics.items() if k[0] == "structserve_kv_pool_census"}
    kv = {k[1][0][1]: v for k, v in metrics.items() if k[0] == "structserve_kv_pages"}
    return {"util": census["held_by_requests"] / census["total"], "reserved": kv["reserved"], "used": kv["used"]}


async def sample_pool(base_url: str, until: asyncio.Event, out: list, t0: float) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        while not until.is_set():
            metrics = parse_metrics((await client.get(f"{base_url}/metrics")).text)
            out.append({"t": time.perf_counter() - t0, **pool_sample(metrics)})
            await asyncio.sleep(0.5)


async def drive(server, stream: list[dict]) -> tuple[list[dict], list[dict], float]:
    url, samples, done = f"{server.base_url}/v1/chat/completions", [], asyncio.Event()
    t0 = time.perf_counter()
    sampler = asyncio.create_task(sample_pool(server.base_url, done, samples, t0))
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0)) as client:
        tasks = [asyncio.create_task(one(client, url, server.model_name, r, t0)) for r in stream]
        results = [await t for t in tqdm(asyncio.as_completed(tasks), total=len(tasks), desc=server.name)]
    elapsed = time.perf_counter() - t0
    done.set()
    await sampler
    return results, samples, elapsed


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def summarize(results: list[dict], samples: list[dict], elapsed: float, metrics: dict) -> dict:
    ok = [r for r in results if r["ok"]]
    stat = {k[1][0][1]: v for k, v in metrics.items() if k[0] == "structserve_scheduler"}
    queue_n = metrics[("structserve_scheduler_queue_seconds_count", ())]
    busy = [s for s in samples if s["used"] > 0]
    return {
        "ok": len(ok),
        "failed": len(results) - len(ok),
        "retractions": stat["retractions"],
        "retracted_requests": stat["retracted_requests"],
        "recomputed_tokens": stat["recomputed_tokens"],
        "output_tokens": sum(r["usage"]["completion_tokens"] for r in ok),
        "stopped_early": sum(not r["hit_max"] for r in ok),
        "tok_s": sum(r["usage"]["completion_tokens"] for r in ok) / elapsed,
        "ttft_p50": pct([r["ttft"] for r in ok], 50),
        "ttft_p99": pct([r["ttft"] for r in ok], 99),
        "e2e_p50": pct([r["e2e"] for r in ok], 50),
        "e2e_p99": pct([r["e2e"] for r in ok], 99),
        "pool_util": statistics.mean(s["util"] for s in samples) if samples else float("nan"),
        "reserved_over_used": statistics.mean(s["reserved"] / s["used"] for s in busy) if busy else float("nan"),
        "queue_mean_s": metrics[("structserve_scheduler_queue_seconds_sum", ())] / max(queue_n, 1),
        "elapsed_s": elapsed,
    }


def run_policy(model: Path, policy: str, args: argparse.Namespace, stream: list[dict]) -> tuple[dict, list]:
    from tests.server import ServerProcess

    name, _, ratio = policy.partition("@")
    env = {
        "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(args.pool),
        "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": "64",
        "STRUCTSERVE_SCHEDULING__ADMISSION": name,
        "STRUCTSERVE_SCHEDULING__RESERVE_RATIO": ratio or "1.0",
    }
    server = ServerProcess(model, f"admission-{policy}", env=env)
    server.name = policy
    server.start()
    try:
        results, samples, elapsed = asyncio.run(drive(server, stream))
        return summarize(results, samples, elapsed, scrape(server.base_url)), samples
    finally:
        server.stop()


def table(rows: dict[str, dict], args: argparse.Namespace) -> None:
    t = Table(title=f"{args.requests} requests at {args.rate}/s, pool {args.pool} tokens, SmolLM2 (one run)")
    cols = [
        "ok",
        "stopped_early",
        "retractions",
        "recomputed_tokens",
        "tok_s",
        "ttft_p50",
        "ttft_p99",
        "e2e_p50",
        "e2e_p99",
    ]
    cols += ["pool_util", "reserved_over_used", "queue_mean_s"]
    t.add_column("policy")
    for c in cols:
        t.add_column(c, justify="right")
    for policy, row in rows.items():
        t.add_row(policy, *(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    Console(width=200).print(t)


def plot(timelines: dict[str, list], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for policy, samples in timelines.items():
        ax.plot([s["t"] for s in samples], [100 * s["util"] for s in samples], label=policy)
    ax.set(xlabel="seconds", ylabel="KV pool held by requests (%)", title="Pool use over the same request stream")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default="sglang,budget,budget@0.5")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rate", type=float, default=3.0)
    parser.add_argument("--pool", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long", type=float, default=0.7, help="share of requests asking for an essay")
    parser.add_argument("--png", default=str(ROOT / "docs" / "img" / "admission_pool.png"))
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    from assets import fetch

    model = fetch(["smollm2"]).smollm2
    stream = stream_of_requests(args.requests, args.rate, args.seed, args.long)
    rows, timelines = {}, {}
    for policy in args.policies.split(","):
        rows[policy], timelines[policy] = run_policy(model, policy, args, stream)
        table(rows, args)
    if args.png:
        plot(timelines, Path(args.png))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""Prefill/decode disaggregation against one aggregated replica, on this machine.

Arms, each a fresh process tree on loopback, one CPU core per engine (``SGLANG_CPU_OMP_THREADS_BIND``):

- ``aggregated``: one structserve replica on core 0;
- ``pd``: a prefill replica (core 0) and a decode replica (core 1) behind SGLang's gateway in PD
  mode, the KV moved by Mooncake over TCP (``tests/pd/topology.py``: what ``make test`` runs).

Workload: ``--requests`` chat requests, each a different Persuasion passage of ``--prompt-words``
words and one question, at most ``--max-tokens`` greedy tokens, streamed, ``--concurrency``
at a time; ``--rounds`` rounds per arm after a warm-up, the arms one after the other (both use
core 0). Reported per arm (median over rounds, min-max): TTFT p50 (first content token), decode
tok/s per request (tokens after the first over the time after it), completion tok/s of the whole
run. Checked before any ratio: the summed prompt tokens are equal, and the share of completions
identical to the aggregated arm's (greedy) is printed. PD's TTFT holds the KV transfer:
``TTFT(pd) - TTFT(aggregated)`` at concurrency 1 bounds the transfer time per request from above
(it also holds the gateway hop and decode's admission).

    make pd && .venv/bin/python bench/pd.py          # ~6 min here (SmolLM2, float32)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.serve_checks import check_prompt_tokens, identical_share, spread  # noqa: E402

QUESTION = "\n\nIn one sentence, who is speaking in this passage?"


def prompts(words: int, n: int) -> list[str]:
    from assets import eval_text

    text = eval_text().split()
    return [" ".join(text[i * words : (i + 1) * words]) + QUESTION for i in range(n)]


async def one(client: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, first, text, usage = time.perf_counter(), None, [], {}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                if choice["delta"].get("content"):
                    first = first or time.perf_counter()
                    text.append(choice["delta"]["content"])
    end = time.perf_counter()
    tokens = usage.get("completion_tokens", 0)
    return {
        "ttft": first - start,
        "decode_tps": (tokens - 1) / (end - first) if tokens > 1 and end > first else 0.0,
        "text": "".join(text),
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": tokens,
    }


async def run(url: str, model: str, texts: list[str], max_tokens: int, concurrency: int) -> tuple[list[dict], float]:
    gate = asyncio.Semaphore(concurrency)

    async def bounded(prompt: str) -> dict:
        async with gate:
            return await one(client, url, model, prompt, max_tokens)

    async with httpx.AsyncClient(timeout=600) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(bounded(p) for p in texts))
    return list(results), time.perf_counter() - start


class Arm:
    """One arm's processes: ``start()`` -> (front URL, served model name); ``stop()``."""

    def __init__(self, name: str, model: Path, logs: Path) -> None:
        self.name, self.model, self.logs = name, model, logs
        self.topology = self.replica = None

    def start(self) -> tuple[str, str]:
        from tests.pd.topology import BASE_ENV, PDTopology
        from tests.server import ServerProcess

        if self.name == "pd":
            self.topology = PDTopology.start(self.model, self.logs)
            return self.topology.gateway.url, self.topology.decode.model_name
        self.replica = ServerProcess(
            self.model, "bench-aggregated", env={**BASE_ENV, "SGLANG_CPU_OMP_THREADS_BIND": "0"}
        )
        self.replica.start()
        return self.replica.base_url, self.replica.model_name

    def stop(self) -> None:
        if self.topology is not None:
            self.topology.stop()
        if self.replica is not None:
            self.replica.stop()
        self.topology = self.replica = None


def summary(rounds: list[tuple[list[dict], float]]) -> dict:
    return {
        "ttft_ms": spread([1000 * statistics.median(r["ttft"] for r in results) for results, _ in rounds]),
        "decode_tps": spread([statistics.median(r["decode_tps"] for r in results) for results, _ in rounds]),
        "throughput": spread([sum(r["completion_tokens"] for r in results) / wall for results, wall in rounds]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="model dir (default: SmolLM2 from the cache)")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompt-words", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    from assets import fetch

    model = args.model or fetch(["smollm2"]).smollm2
    texts = prompts(args.prompt_words, args.requests)
    data: dict = {}
    with tempfile.TemporaryDirectory() as logs:
        for arm_name in ("aggregated", "pd"):
            arm = Arm(arm_name, model, Path(logs))
            url, served = arm.start()
            try:
                for c in args.concurrency:
                    asyncio.run(run(url, served, texts[:2], args.max_tokens, c))  # warm-up, not counted
                    data[(arm_name, c)] = [
                        asyncio.run(run(url, served, texts, args.max_tokens, c)) for _ in range(args.rounds)
                    ]
            finally:
                arm.stop()
    return report(data, args)


def report(data: dict, args: argparse.Namespace) -> int:
    table = Table(
        title=f"PD vs aggregated: {args.requests} requests, ~{args.prompt_words}-word prompts, {args.max_tokens} tokens"
    )
    for col in (
        "concurrency",
        "arm",
        "TTFT p50 ms",
        "decode tok/s per request",
        "completion tok/s",
        "ratio",
        "identical",
    ):
        table.add_column(col)
    out = []
    for c in args.concurrency:
        sums = {arm: sum(r["prompt_tokens"] for r in data[(arm, c)][0][0]) for arm in ("aggregated", "pd")}
        check_prompt_tokens(sums)
        anchor = [r["text"] for r in data[("aggregated", c)][0][0]]
        base = summary(data[("aggregated", c)])
        for arm in ("aggregated", "pd"):
            s = summary(data[(arm, c)])
            same = statistics.mean(identical_share([r["text"] for r in rs], anchor) for rs, _ in data[(arm, c)])
            ratio = s["throughput"].ratio(base["throughput"])
            table.add_row(
                str(c),
                arm,
                str(s["ttft_ms"]),
                str(s["decode_tps"]),
                str(s["throughput"]),
                f"{ratio:.2f}×",
                f"{same:.0%}",
            )
            out.append({"concurrency": c, "arm": arm, **{k: vars(v) for k, v in s.items()}, "identical": same})
    Console(width=160).print(table)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

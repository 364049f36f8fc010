"""Serving overhead: structserve vs SGLang's own OpenAI server, same model and engine.

Starts, on 127.0.0.1 with identical engine settings: ``python -m sglang.launch_server``
with runtime_ext disabled (the anchor: upstream as shipped), the same with runtime_ext
loaded through its entry point, ``structserve serve`` (bf16 KV) and ``structserve serve``
with the C8-D cache. Sends each the same streamed greedy chat requests (prompts cut from
real text) and prints TTFT p50/p99 and output tokens/s per concurrency, with ratios to the
anchor; then the same prompts through HF transformers ``generate`` (batch = concurrency,
greedy, in this process) for the same table. The scheduler's own report says which
columns ran runtime_ext.

    .venv/bin/python bench/serve_overhead.py            # SmolLM2, concurrency 1 8 32
    .venv/bin/python bench/serve_overhead.py --model DIR --concurrency 1 8 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import ANCHOR, SERVERS, launch, plugin_state, signal_tree, stop  # noqa: E402
from tests.server import free_port  # noqa: E402


@dataclass
class Result:
    ttfts: list[float]
    completion_tokens: int
    wall_s: float
    errors: int

    @property
    def tok_s(self) -> float:
        return self.completion_tokens / self.wall_s

    def pct(self, q: float) -> float:
        xs = sorted(self.ttfts)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def prompts(n: int) -> list[str]:
    from assets import eval_text, fetch

    fetch(["austen"])
    words = eval_text().split()
    step = 90
    return [
        "Continue this passage in two sentences:\n" + " ".join(words[2000 + i * step : 2000 + i * step + 80])
        for i in range(n)
    ]


async def one(client: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", url, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and any(c["delta"].get("content") for c in chunk.get("choices", [])):
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return (ttft if ttft is not None else time.perf_counter() - t0), tokens


async def run_level(base: str, model: str, texts: list[str], concurrency: int, max_tokens: int) -> Result:
    url = f"{base}/v1/chat/completions"
    sem = asyncio.Semaphore(concurrency)
    ttfts, tokens, errors = [], 0, 0

    async with httpx.AsyncClient(timeout=600) as client:

        async def task(prompt: str) -> None:
            nonlocal tokens, errors
            async with sem:
                try:
                    ttft, n = await one(client, url, model, prompt, max_tokens)
                    ttfts.append(ttft)
                    tokens += n
                except httpx.HTTPError:
                    errors += 1

        await asyncio.gather(*(task(p) for p in texts[:2]))  # warm-up, not measured
        ttfts.clear()
        tokens = 0  # noqa: E702
        t0 = time.perf_counter()
        await asyncio.gather(*(task(p) for p in texts))
        return Result(ttfts, tokens, time.perf_counter() - t0, errors)


def round_order(names: list[str], rnd: int) -> list[str]:
    """Round ``rnd``'s order: rotated by the round, reversed every other round, so machine
    drift hits every server alike."""
    k = rnd % len(names)
    order = names[k:] + names[:k]
    return order[::-1] if rnd % 2 else order


def measure(model: Path, args: argparse.Namespace, texts_for: dict[int, list[str]]) -> tuple[dict, dict[str, str]]:
    """All servers up at once, the ones not measured frozen with SIGSTOP (an idle SGLang
    scheduler still spins its OpenMP threads); each level runs ``rounds`` times per server."""
    ports = {name: free_port() for name in args.servers}
    procs = {name: launch(name, model, port) for name, port in ports.items()}
    runs: dict[str, dict[int, list[Result]]] = {n: {c: [] for c in args.concurrency} for n in ports}
    try:
        for c in args.concurrency:
            for rnd in range(args.rounds):
                for name in round_order(list(ports), rnd):
                    others = [p for n, p in procs.items() if n != name]
                    for proc in others:
                        signal_tree(proc, signal.SIGSTOP)
                    try:
                        base = f"http://127.0.0.1:{ports[name]}"
                        result = asyncio.run(run_level(base, model.name, texts_for[c], c, args.max_tokens))
                    finally:
                        for proc in others:
                            signal_tree(proc, signal.SIGCONT)
                    runs[name][c].append(result)
        states = {name: plugin_state(name, port) for name, port in ports.items()}
    finally:
        for proc in procs.values():
            stop(proc)
    return {n: {c: pooled(rs) for c, rs in levels.items()} for n, levels in runs.items()}, states


def pooled(results: list[Result]) -> Result:
    """All rounds together: TTFT samples pooled, tokens/s = total tokens / total time."""
    return Result(
        ttfts=[t for r in results for t in r.ttfts],
        completion_tokens=sum(r.completion_tokens for r in results),
        wall_s=sum(r.wall_s for r in results),
        errors=sum(r.errors for r in results),
    )


def table(results: dict[str, dict[int, Result]], args: argparse.Namespace) -> Table:
    """Ratios against ``ANCHOR`` when it ran, else against the first server."""
    base = ANCHOR if ANCHOR in results else next(iter(results))
    t = Table(
        title=f"serve overhead: {args.model.name}, {args.max_tokens} max tokens, greedy, streamed, "
        f"{args.rounds} rounds pooled; ratios vs {base}"
    )
    for col in ("conc", "server", "reqs", "TTFT p50/p99 ms", "TTFT p50 ratio", "tok/s", "tok/s ratio", "errors"):
        t.add_column(col, justify="right")
    for c in args.concurrency:
        anchor = results[base][c]
        for name, levels in results.items():
            r = levels[c]
            ttft = f"{r.pct(0.5):.0f} / {r.pct(0.99):.0f}" if r.ttfts else "-"
            t.add_row(
                str(c),
                name,
                str(len(r.ttfts)),
                ttft,
                f"{r.pct(0.5) / anchor.pct(0.5):.3f}" if r.ttfts else "",
                f"{r.tok_s:.1f}",
                f"{r.tok_s / anchor.tok_s:.3f}",
                str(r.errors),
            )
        t.add_section()
    return t


def main() -> None:
    from assets import model_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2 from the asset cache)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-level", type=int, default=0, help="default: max(8, 2 x concurrency)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3, help="runs per level and server, order alternating")
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=list(SERVERS))
    parser.add_argument("--no-hf", action="store_true", help="skip the HF transformers generate rows")
    args = parser.parse_args()
    args.model = args.model or model_dir("smollm2")
    n_max = max(max(8, 2 * c) for c in args.concurrency)
    texts = prompts(max(n_max, args.requests_per_level) + 2)
    texts_for = {c: texts[: (args.requests_per_level or max(8, 2 * c))] for c in args.concurrency}
    results, states = measure(args.model, args, texts_for)
    if not args.no_hf:
        from bench.hf_generate import hf_level

        hf = {c: hf_level(args.model, texts_for[c], c, args.max_tokens) for c in args.concurrency}
        results["HF generate"] = {c: Result(*run, errors=0) for c, run in hf.items()}
    console = Console(width=160)
    console.print(table(results, args))
    for name, state in states.items():
        console.print(f"{name}: {state}")


if __name__ == "__main__":
    main()

"""Serving overhead: structserve vs SGLang's own OpenAI server, same model and engine.

Starts, on 127.0.0.1 with identical engine settings: ``python -m sglang.launch_server``
with runtime_ext disabled (the anchor: upstream as shipped), the same with runtime_ext
loaded through its entry point, ``structserve serve`` (bf16 KV), ``structserve serve``
with the C8-D cache and with W8A8 linear layers (``bench/servers.SERVERS``; ``--servers`` picks).
Sends each the same streamed greedy chat requests (prompts cut from real text) and prints, per
concurrency, the median over ``--rounds`` alternating rounds of TTFT p50
and output tokens/s with their min–max, ratios of the medians to the anchor, and the share
of greedy completions identical to the anchor's; the same prompts also go through HF
transformers ``generate`` (batch = concurrency, greedy, in this process, every server frozen),
as one more participant in each round's rotation, so machine drift hits it as it hits the servers.
Every server (and HF) must have seen the same prompt tokens (``usage.prompt_tokens`` summed per
round): if not, the run fails naming the sums. The attention backend column is what each server
reports (structserve's /metrics, SGLang's /server_info).

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
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.serve_checks import PromptTokensDiffer, check_prompt_tokens, identical_share, spread  # noqa: E402
from bench.servers import ANCHOR, SERVERS, attention_backend, launch, plugin_state, signal_tree, stop  # noqa: E402
from tests.server import free_port  # noqa: E402


@dataclass
class Result:
    """One round of one level on one server."""

    ttfts: list[float]
    completion_tokens: int
    wall_s: float
    errors: int
    prompt_tokens: int = 0
    texts: list[str] = field(default_factory=list)  # completion per prompt, in prompt order

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


@dataclass
class Reply:
    ttft: float
    completion_tokens: int
    prompt_tokens: int
    text: str


async def one(client: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int) -> Reply:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft, usage, parts = None, {}, []
    async with client.stream("POST", url, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            content = "".join(c["delta"].get("content") or "" for c in chunk.get("choices", []))
            if ttft is None and content:
                ttft = time.perf_counter() - t0
            parts.append(content)
            usage = chunk.get("usage") or usage
    ttft = ttft if ttft is not None else time.perf_counter() - t0
    return Reply(ttft, usage.get("completion_tokens", 0), usage.get("prompt_tokens", 0), "".join(parts))


async def run_level(base: str, model: str, texts: list[str], concurrency: int, max_tokens: int) -> Result:
    url = f"{base}/v1/chat/completions"
    sem = asyncio.Semaphore(concurrency)
    replies: list[Reply | None] = [None] * len(texts)

    async with httpx.AsyncClient(timeout=600) as client:

        async def task(i: int, prompt: str, keep: bool) -> None:
            async with sem:
                try:
                    reply = await one(client, url, model, prompt, max_tokens)
                except httpx.HTTPError:
                    return
                if keep:
                    replies[i] = reply

        await asyncio.gather(*(task(i, p, False) for i, p in enumerate(texts[:2])))  # warm-up, not measured
        t0 = time.perf_counter()
        await asyncio.gather(*(task(i, p, True) for i, p in enumerate(texts)))
        wall = time.perf_counter() - t0
    done = [r for r in replies if r is not None]
    return Result(
        ttfts=[r.ttft for r in done],
        completion_tokens=sum(r.completion_tokens for r in done),
        wall_s=wall,
        errors=len(texts) - len(done),
        prompt_tokens=sum(r.prompt_tokens for r in done),
        texts=[r.text if r is not None else "" for r in replies],
    )


def round_order(names: list[str], rnd: int) -> list[str]:
    """Round ``rnd``'s order: rotated by the round, reversed every other round, so machine
    drift hits every server alike."""
    k = rnd % len(names)
    order = names[k:] + names[:k]
    return order[::-1] if rnd % 2 else order


Runs = dict[str, dict[int, list[Result]]]  # server -> concurrency -> one Result per round


HF = "HF generate"


def measure(model: Path, args: argparse.Namespace, texts_for: dict[int, list[str]]) -> tuple[Runs, dict, dict]:
    """All servers up at once, the ones not measured frozen with SIGSTOP (an idle SGLang
    scheduler still spins its OpenMP threads); each level runs ``rounds`` times per server and
    for HF (unless ``--no-hf``; all servers frozen then). Also returns each server's runtime_ext
    state and attention backend, as it reports them."""
    ports = {name: free_port() for name in args.servers}
    procs = {name: launch(name, model, port) for name, port in ports.items()}
    participants = list(ports) + ([] if args.no_hf else [HF])
    runs: Runs = {n: {c: [] for c in args.concurrency} for n in participants}
    try:
        for c in args.concurrency:
            for rnd in range(args.rounds):
                for name in round_order(participants, rnd):
                    others = [p for n, p in procs.items() if n != name]
                    for proc in others:
                        signal_tree(proc, signal.SIGSTOP)
                    try:
                        runs[name][c].append(run_one(name, ports.get(name), model, args, texts_for[c], c))
                    finally:
                        for proc in others:
                            signal_tree(proc, signal.SIGCONT)
        states = {name: plugin_state(name, port) for name, port in ports.items()}
        backends = {name: attention_backend(name, port) for name, port in ports.items()}
    finally:
        for proc in procs.values():
            stop(proc)
    if not args.no_hf:
        backends[HF] = "transformers (in process)"
    return runs, states, backends


def run_one(name: str, port: int | None, model: Path, args: argparse.Namespace, texts: list[str], c: int) -> Result:
    """One level of one participant: a server over HTTP, or HF ``generate`` in this process."""
    if name == HF:
        from bench.hf_generate import hf_level

        ttfts, n, wall, n_prompt, hf_texts = hf_level(args.model, texts, c, args.max_tokens)
        return Result(ttfts, n, wall, 0, n_prompt, hf_texts)
    return asyncio.run(run_level(f"http://127.0.0.1:{port}", model.name, texts, c, args.max_tokens))


def check_same_prompts(runs: Runs) -> None:
    """Per round, every server's prompt tokens summed over the levels must be equal."""
    rounds = min(len(rs) for levels in runs.values() for rs in levels.values())
    for rnd in range(rounds):
        sums = {name: sum(rs[rnd].prompt_tokens for rs in levels.values()) for name, levels in runs.items()}
        try:
            check_prompt_tokens(sums)
        except PromptTokensDiffer as exc:
            raise PromptTokensDiffer(f"round {rnd + 1}: {exc}") from None


def same_share(results: list[Result], reference: list[Result]) -> float:
    """Share of completions identical to the reference server's, same prompt and round."""
    texts = [t for r in results for t in r.texts]
    return identical_share(texts, [t for r in reference for t in r.texts])


def table(runs: Runs, backends: dict[str, str], args: argparse.Namespace) -> Table:
    """Medians over rounds (min–max); ratios of medians and identical completions against
    ``ANCHOR`` when it ran, else against the first server."""
    base = ANCHOR if ANCHOR in runs else next(iter(runs))
    t = Table(
        title=f"serve overhead: {args.model.name}, {args.max_tokens} max tokens, greedy, streamed; median "
        f"(min–max) over {args.rounds} rounds; ratios and identical completions vs {base}"
    )
    cols = ("conc", "server", "attention backend", "reqs", "TTFT p50 ms", "TTFT ratio", "tok/s", "tok/s ratio")
    for col in (*cols, "identical", "errors"):
        t.add_column(col, justify="right")
    for c in args.concurrency:
        anchor_ttft = spread([r.pct(0.5) for r in runs[base][c]])
        anchor_tok_s = spread([r.tok_s for r in runs[base][c]])
        for name, levels in runs.items():
            rs = levels[c]
            ttft = spread([r.pct(0.5) for r in rs]) if all(r.ttfts for r in rs) else None
            tok_s = spread([r.tok_s for r in rs])
            t.add_row(
                str(c),
                name,
                backends.get(name, "-"),
                str(len(rs[0].texts)),
                str(ttft) if ttft else "-",
                f"{ttft.ratio(anchor_ttft):.3f}" if ttft else "",
                str(tok_s),
                f"{tok_s.ratio(anchor_tok_s):.3f}",
                f"{same_share(rs, runs[base][c]):.0%}",
                str(sum(r.errors for r in rs)),
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
    runs, states, backends = measure(args.model, args, texts_for)
    console = Console(width=200)
    console.print(table(runs, backends, args))
    for name, state in states.items():
        console.print(f"{name}: {state}")
    for name, levels in runs.items():
        console.print(
            f"{name}: {sum(r.prompt_tokens for rs in levels.values() for r in rs)} prompt tokens in all rounds"
        )
    try:
        check_same_prompts(runs)
    except PromptTokensDiffer as exc:
        raise SystemExit(f"FAILED: {exc}") from None


if __name__ == "__main__":
    main()

"""Serving overhead: structserve vs SGLang's own OpenAI server, same model and engine.

Starts ``python -m sglang.launch_server`` and ``structserve serve`` one after the other
on 127.0.0.1 with identical engine settings, sends both the same streamed greedy chat
requests (prompts cut from real text), and prints TTFT p50/p99 and output tokens/s at
each concurrency, with ours/SGLang ratios.

    .venv/bin/python bench/serve_overhead.py            # SmolLM2, concurrency 1 8 32
    .venv/bin/python bench/serve_overhead.py --model DIR --concurrency 1 8 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server import free_port  # noqa: E402

ENGINE = {"max_total_tokens": 32768, "page_size": 16, "max_running_requests": 64, "dtype": "bfloat16"}


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


def sglang_cmd(
    model: Path, port: int, engine: dict | None = None, extra: tuple[str, ...] = ("--incremental-streaming-output",)
) -> list[str]:
    """SGLang's own server on the same engine settings as structserve (``engine``: ENGINE)."""
    engine = engine or ENGINE
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--attention-backend",
        "torch_native",
        "--max-total-tokens",
        str(engine["max_total_tokens"]),
        "--page-size",
        str(engine["page_size"]),
        "--max-running-requests",
        str(engine["max_running_requests"]),
        "--dtype",
        engine["dtype"],
        "--random-seed",
        "0",
        "--log-level",
        "warning",
        *extra,
        "--served-model-name",
        model.name,
    ]


def ours_cmd(model: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "service", "serve", "--model", str(model), "--port", str(port)]


def ours_env() -> dict[str, str]:
    return {
        "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(ENGINE["max_total_tokens"]),
        "STRUCTSERVE_ENGINE__PAGE_SIZE": str(ENGINE["page_size"]),
        "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": str(ENGINE["max_running_requests"]),
        "STRUCTSERVE_DTYPE": ENGINE["dtype"],
        "STRUCTSERVE_LOG_LEVEL": "warning",
    }


def start(cmd: list[str], env: dict[str, str], ready_url: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        cmd, env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", **env}, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[2]} exited early; see {log}")
        try:
            if httpx.get(ready_url, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise SystemExit(f"{cmd[2]} not ready in 600 s; see {log}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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


def launch(name: str, model: Path, port: int) -> subprocess.Popen:
    base = f"http://127.0.0.1:{port}"
    if name == "sglang":
        return start(sglang_cmd(model, port), {}, f"{base}/health_generate", Path("/tmp/bench-sglang.log"))
    return start(ours_cmd(model, port), ours_env(), f"{base}/ready", Path("/tmp/bench-structserve.log"))


def signal_tree(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """Send ``sig`` to a server and all its children (scheduler, detokenizer)."""
    import psutil

    root = psutil.Process(proc.pid)
    for p in [root, *root.children(recursive=True)]:
        p.send_signal(sig)


def measure(model: Path, args: argparse.Namespace, texts_for: dict[int, list[str]]) -> dict[str, dict[int, Result]]:
    """Both servers up at once, the one not measured frozen with SIGSTOP (an idle SGLang
    scheduler still spins its OpenMP threads); each concurrency level runs ``rounds``
    times per server, alternating A B / B A so machine drift hits both alike."""
    ports = {"sglang": free_port(), "structserve": free_port()}
    procs = {name: launch(name, model, port) for name, port in ports.items()}
    runs: dict[str, dict[int, list[Result]]] = {n: {c: [] for c in args.concurrency} for n in ports}
    try:
        for c in args.concurrency:
            for rnd in range(args.rounds):
                order = list(ports) if rnd % 2 == 0 else list(ports)[::-1]
                for name in order:
                    base = f"http://127.0.0.1:{ports[name]}"
                    other = procs["sglang" if name == "structserve" else "structserve"]
                    signal_tree(other, signal.SIGSTOP)
                    try:
                        result = asyncio.run(run_level(base, model.name, texts_for[c], c, args.max_tokens))
                    finally:
                        signal_tree(other, signal.SIGCONT)
                    runs[name][c].append(result)
    finally:
        for proc in procs.values():
            stop(proc)
    return {n: {c: pooled(rs) for c, rs in levels.items()} for n, levels in runs.items()}


def pooled(results: list[Result]) -> Result:
    """All rounds together: TTFT samples pooled, tokens/s = total tokens / total time."""
    return Result(
        ttfts=[t for r in results for t in r.ttfts],
        completion_tokens=sum(r.completion_tokens for r in results),
        wall_s=sum(r.wall_s for r in results),
        errors=sum(r.errors for r in results),
    )


def table(results: dict[str, dict[int, Result]], args: argparse.Namespace) -> Table:
    t = Table(
        title=f"serve overhead: {args.model.name}, {args.max_tokens} max tokens, greedy, streamed, "
        f"{args.rounds} rounds pooled"
    )
    for col in (
        "conc",
        "reqs",
        "SGLang TTFT p50/p99 ms",
        "ours TTFT p50/p99 ms",
        "TTFT p50 ratio",
        "SGLang tok/s",
        "ours tok/s",
        "tok/s ratio",
        "errors",
    ):
        t.add_column(col, justify="right")
    for c in args.concurrency:
        s, o = results["sglang"][c], results["structserve"][c]
        t.add_row(
            str(c),
            str(len(o.ttfts)),
            f"{s.pct(0.5):.0f} / {s.pct(0.99):.0f}",
            f"{o.pct(0.5):.0f} / {o.pct(0.99):.0f}",
            f"{o.pct(0.5) / s.pct(0.5):.3f}",
            f"{s.tok_s:.1f}",
            f"{o.tok_s:.1f}",
            f"{o.tok_s / s.tok_s:.3f}",
            f"{s.errors}/{o.errors}",
        )
    return t


def main() -> None:
    from assets import model_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2 from the asset cache)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-level", type=int, default=0, help="default: max(8, 2 x concurrency)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3, help="runs per level and server, order alternating")
    args = parser.parse_args()
    args.model = args.model or model_dir("smollm2")
    n_max = max(max(8, 2 * c) for c in args.concurrency)
    texts = prompts(max(n_max, args.requests_per_level) + 2)
    texts_for = {c: texts[: (args.requests_per_level or max(8, 2 * c))] for c in args.concurrency}
    results = measure(args.model, args, texts_for)
    Console(width=160).print(table(results, args))


if __name__ == "__main__":
    main()

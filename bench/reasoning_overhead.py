"""Reasoning-budget cost: decode throughput with an exact budget vs without.

1. Service (``structserve serve`` on the tiny Qwen3, real Qwen3 template, HTTP,
   streamed): thinking on, ``max_tokens`` N, either no budget (the random model never
   closes ``</think>``: one engine request of N tokens) or ``max_reasoning_tokens`` N/2
   (reasoning phase, forced end marker, answer phase: N tokens in all). Alternating
   rounds at each concurrency; throughput = completion tokens / wall time.
2. Mechanism (``--mechanism``): the alternative, a logits processor, needs SGLang's
   overlap scheduler off (it sees output one step late otherwise). ``sglang.Engine``
   in-process, same model, overlap on vs off, N tokens with ignore_eos.

    .venv/bin/python bench/reasoning_overhead.py
    .venv/bin/python bench/reasoning_overhead.py --rounds 4 --max-tokens 128 --mechanism
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server import ServerProcess  # noqa: E402

PROMPT = [{"role": "user", "content": "Think it through, then tell me a story about the sea."}]


async def one(client: httpx.AsyncClient, server: ServerProcess, max_tokens: int, budget: int | None, seed: int) -> int:
    body = {
        "model": server.model_name,
        "messages": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        "enable_thinking": True,
    }
    if budget is not None:
        body["max_reasoning_tokens"] = budget
    tokens = 0
    async with client.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if line.startswith("data: {") and (usage := json.loads(line[6:]).get("usage")):
                tokens = usage["completion_tokens"]
    return tokens


async def round_(server: ServerProcess, conc: int, max_tokens: int, budget: int | None, seed: int) -> tuple[int, float]:
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        counts = await asyncio.gather(*(one(client, server, max_tokens, budget, seed + i) for i in range(conc)))
    return sum(counts), time.perf_counter() - start


def service_table(model: Path, rounds: int, max_tokens: int, concurrency: list[int]) -> Table:
    budget = max_tokens // 2
    server = ServerProcess(model, name="bench-reasoning", env={"STRUCTSERVE_DTYPE": "float32"})
    server.start()
    table = Table(
        title=f"thinking on, {max_tokens} max tokens: no budget vs budget {budget} "
        f"({model.name}, {rounds} alternating rounds)"
    )
    for col in ("conc", "no budget tok/s", "budget tok/s", "cost", "tokens (no budget / budget)"):
        table.add_column(col, justify="right")
    try:
        asyncio.run(round_(server, 1, 16, 8, 0))  # warm up
        for conc in concurrency:
            totals = {None: [0, 0.0], budget: [0, 0.0]}
            for r in tqdm(range(rounds), desc=f"service c={conc}"):
                for b in (None, budget) if r % 2 == 0 else (budget, None):
                    tokens, wall = asyncio.run(round_(server, conc, max_tokens, b, seed=100 * r))
                    totals[b][0] += tokens
                    totals[b][1] += wall
            free, bounded = (totals[k][0] / totals[k][1] for k in (None, budget))
            table.add_row(
                str(conc),
                f"{free:.1f}",
                f"{bounded:.1f}",
                f"{(1 - bounded / free) * 100:+.1f}%",
                f"{totals[None][0]} / {totals[budget][0]}",
            )
    finally:
        server.stop()
    return table


def _engine_rate(model: Path, overlap_off: bool, max_tokens: int, batch: int, rounds: int) -> float:
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    import sglang

    engine = sglang.Engine(
        model_path=str(model),
        device="cpu",
        dtype="float32",
        attention_backend="torch_native",
        max_total_tokens=16384,
        page_size=16,
        log_level="error",
        sleep_on_idle=True,
        disable_overlap_schedule=overlap_off,
        random_seed=0,
    )
    try:
        params = {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0}
        engine.generate(prompt=["warm up"], sampling_params={**params, "max_new_tokens": 4})
        start, tokens = time.perf_counter(), 0
        for r in range(rounds):
            outs = engine.generate(
                prompt=[f"story {r}-{i} about the sea" for i in range(batch)], sampling_params=params
            )
            tokens += sum(o["meta_info"]["completion_tokens"] for o in outs)
        return tokens / (time.perf_counter() - start)
    finally:
        engine.shutdown()


def mechanism_table(model: Path, max_tokens: int, concurrency: list[int], rounds: int) -> Table:
    table = Table(
        title=f"SGLang overlap scheduler on vs off (a logits-processor budget needs it off), "
        f"{model.name}, {max_tokens} tokens, ignore_eos"
    )
    for col in ("batch", "overlap on tok/s", "overlap off tok/s", "cost of off"):
        table.add_column(col, justify="right")
    for batch in concurrency:
        on = _engine_rate(model, False, max_tokens, batch, rounds)
        off = _engine_rate(model, True, max_tokens, batch, rounds)
        table.add_row(str(batch), f"{on:.1f}", f"{off:.1f}", f"{(1 - off / on) * 100:+.1f}%")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--mechanism", action="store_true", help="also measure overlap on vs off in sglang.Engine")
    args = parser.parse_args()
    from assets import fetch

    model = fetch().qwen3_tiny
    console = Console(width=160)
    console.print(service_table(model, args.rounds, args.max_tokens, args.concurrency))
    if args.mechanism:
        console.print(mechanism_table(model, args.max_tokens, args.concurrency, max(2, args.rounds // 2)))


if __name__ == "__main__":
    main()

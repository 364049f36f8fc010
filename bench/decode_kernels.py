"""Decode with runtime_ext's compiled decode kernels vs torch's, side by side in one run.

Two in-process ``sglang.Engine``s on SmolLM2-135M (bf16, runtime_ext's attention backend), one with
``decode_kernels: native`` (bf16 linear layers of 1-64 rows through ``runtime_ext/ops/linear_cpu``,
decode attention over the pool in place through ``attention_cpu``), one with ``reference`` (torch's
``F.linear`` and the gather + SDPA path), driven alternately (which goes first alternates by round).
Decode speed is differential, so prefill never counts: each batch of ``--context``-token prompts is
timed with 8 and with ``8 + --new`` new tokens, ``batch × new / (t_long − t_short)``. Greedy tokens
of both are compared (the share of requests whose tokens are equal, and of tokens before the first
difference), and each against a float32 engine's greedy tokens for the same prompts (which of the two
bf16 arms writes what float32 writes). Also a model-free table: the 30 layers' linear products alone at SmolLM2's shapes
(distinct weights per layer, so they stream from memory as in the model), torch vs the loop.

    .venv/bin/python bench/decode_kernels.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from decode_attention import decode_speed  # noqa: E402

ARMS = ("native", "reference")


def start(model: Path, kernels: str, dtype: str = "bfloat16"):
    from runtime_ext.config import RuntimeExtConfig
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    replace(RuntimeExtConfig.from_env(), decode_kernels=kernels).export()
    options = EngineOptions(model_path=model, dtype=dtype, engine=EngineSettings(max_total_tokens=40960))
    return sglang.Engine(**options.engine_kwargs())


def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[int, float]:
    """Requests with equal tokens, and the mean share of tokens before the first difference."""
    prefix = []
    for x, y in zip(a, b):
        same = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        prefix.append(same / max(len(x), 1))
    return sum(x == y for x, y in zip(a, b)), statistics.mean(prefix)


def engine_table(model: Path, windows: list[list[int]], args) -> Table:
    batches = [int(b) for b in args.batches.split(",")]
    engines = {arm: start(model, arm) for arm in ARMS}
    engines["float32"] = start(model, "reference", "float32")  # the kernels take bf16 only: the anchor
    speeds: dict[tuple[str, int], list[float]] = {}
    tokens: dict[tuple[str, int], list] = {}
    try:
        for engine in engines.values():
            engine.generate(input_ids=windows, sampling_params={"max_new_tokens": 1})  # prefix cache
        for r in tqdm(range(args.rounds), desc="rounds"):
            order = ARMS if r % 2 == 0 else ARMS[::-1]
            for b in batches:
                for arm in (*order, "float32") if r == 0 else order:
                    speed, toks = decode_speed(engines[arm], windows[:b], args.new)
                    speeds.setdefault((arm, b), []).append(speed)
                    tokens[arm, b] = toks
    finally:
        for engine in engines.values():
            engine.shutdown()
    table = Table(title=f"decode tok/s, SmolLM2-135M bf16, {args.context}-token prompts, {args.new} new tokens")
    cols = ("batch", "native", "reference", "native / reference", "equal requests", "tokens before a difference")
    for col in (*cols, "native = float32 (tokens before a difference)", "reference = float32 (same)"):
        table.add_column(col, justify="right")
    for b in batches:
        cells = []
        for arm in ARMS:
            s = speeds[arm, b]
            cells.append(f"{statistics.median(s):.1f} ({min(s):.1f}–{max(s):.1f})")
        ratios = [n / ref for n, ref in zip(speeds["native", b], speeds["reference", b])]
        equal, prefix = agreement(tokens["native", b], tokens["reference", b])
        anchor = [f"{e}/{b} ({p:.0%})" for e, p in (agreement(tokens[arm, b], tokens["float32", b]) for arm in ARMS)]
        table.add_row(str(b), *cells, f"{statistics.median(ratios):.2f}×", f"{equal}/{b}", f"{prefix:.0%}", *anchor)
    return table


ROWS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # those the loaded library takes


def linear_table(args) -> Table:
    import torch
    import torch.nn.functional as F

    from runtime_ext.ops import linear_cpu

    shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # SmolLM2: QKV, O, gate/up, down
    weights = [[torch.randn(n, k).bfloat16() for n, k in shapes] for _ in range(30)]
    table = Table(title="30 layers' linear products alone (SmolLM2 shapes, distinct weights), ms")
    for col in ("rows", "compiled", "torch F.linear", "compiled loop", "torch / loop", "loop GB/s"):
        table.add_column(col, justify="right")
    for rows in ROWS:
        if rows > linear_cpu.max_rows(576):
            continue
        path = "AMX tiles" if rows > 4 and linear_cpu.amx() else "dot products"
        xs = {k: torch.randn(rows, k).bfloat16() for k in (576, 1536)}
        times: dict[str, list[float]] = {"torch": [], "loop": []}
        for _ in range(args.rounds * 3):
            for name, fn in (("torch", F.linear), ("loop", linear_cpu.linear)):
                t0 = time.perf_counter()
                for layer in weights:
                    for w in layer:
                        fn(xs[w.shape[1]], w)
                times[name].append((time.perf_counter() - t0) * 1e3)
        t, c = statistics.median(times["torch"]), statistics.median(times["loop"])
        table.add_row(str(rows), path, f"{t:.1f}", f"{c:.1f}", f"{t / c:.2f}×", f"{30 * 576 * 6144 * 2 / c / 1e6:.1f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,4,8,16,32")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from assets import eval_text, fetch

    console = Console(width=200)
    console.print(linear_table(args))
    model = fetch(["smollm2", "austen"]).smollm2
    n = max(int(b) for b in args.batches.split(","))
    text = eval_text()[: args.context * 8 * n]
    ids = AutoTokenizer.from_pretrained(str(model)).encode(text, add_special_tokens=False)
    windows = [ids[i * args.context : (i + 1) * args.context] for i in range(n)]
    console.print(engine_table(model, windows, args))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

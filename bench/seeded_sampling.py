"""Seeded sampling per call: SGLang's ``multinomial_with_seed`` (torch.compile'd, as the engine runs it
on the CPU) vs runtime_ext's compiled kernel (``runtime_ext/ops/sample_cpu``), side by side in one
process, on log-softmax rows of SmolLM2's vocabulary width (logits ~ N(0, scale²)), checking both
draw the same tokens.

    .venv/bin/python bench/seeded_sampling.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,8,32")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--scale", type=float, default=3.0, help="logits' standard deviation")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    import torch
    from sglang.srt.layers import sampler

    from runtime_ext.ops import sample_cpu

    arms = {"SGLang (torch.compile)": sampler.multinomial_with_seed, "compiled kernel": sample_cpu.sample}
    table = Table(title=f"one seeded draw per row, {args.vocab} entries, ms (median of {args.repeats}, min–max)")
    for col in ("rows", *arms, "SGLang / kernel", "same draws"):
        table.add_column(col, justify="right")
    for rows in (int(r) for r in args.rows.split(",")):
        gen = torch.Generator().manual_seed(rows)
        logprobs = torch.log_softmax(torch.randn(rows, args.vocab, generator=gen) * args.scale, dim=-1)
        seeds, positions = torch.randint(0, 2**62, (rows,), generator=gen), torch.randint(0, 4096, (rows,))
        draws = {name: fn(logprobs, seeds, positions) for name, fn in arms.items()}  # (compiles SGLang's)
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.repeats):
            for name, fn in arms.items():
                t0 = time.perf_counter()
                fn(logprobs, seeds, positions)
                times[name].append((time.perf_counter() - t0) * 1e3)
        cells = [f"{statistics.median(t):.2f} ({min(t):.2f}–{max(t):.2f})" for t in times.values()]
        ratio = statistics.median(times["SGLang (torch.compile)"]) / statistics.median(times["compiled kernel"])
        same = int((draws["SGLang (torch.compile)"] == draws["compiled kernel"]).sum())
        table.add_row(str(rows), *cells, f"{ratio:.1f}×", f"{same}/{rows}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()

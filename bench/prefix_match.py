"""Prefix-cache bookkeeping cost, no model: match time and page-size waste.

1. Match time per request: SGLang's ``RadixCache`` vs runtime_ext's ``CombinedRadixCache``
   (C = 1, 4, 8), 16-token pages, the same tree (64 chat histories over 4 shared system
   prompts of ~1k tokens), queries whose reusable prefix is unit-aligned for every C (so all
   caches return the same hit tokens). Median of ``--rounds`` passes over 256 queries.
2. Memory wasted in partly filled last pages for page sizes 1..128 over a realistic
   request-length distribution (log-normal, median ~700 tokens, prompt + output), by
   Monte-Carlo; plotted to ``docs/img/page_waste.png``.

    .venv/bin/python bench/prefix_match.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
P, UNIT = 16, 8 * 16  # pages; 8 pages: aligned for C = 1, 4, 8


def workload(seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    rng = random.Random(seed)
    systems = [[rng.randrange(1000, 50000) for _ in range(1024)] for _ in range(4)]
    stored = [systems[i % 4] + [rng.randrange(1000, 50000) for _ in range(rng.randrange(64, 600))] for i in range(64)]
    queries = []
    for i in range(256):
        base = stored[i % 64]
        cut = rng.randrange(1, len(base) // UNIT + 1) * UNIT  # an aligned shared prefix
        queries.append(base[:cut] + [rng.randrange(50000, 60000) for _ in range(40)])
    return stored, queries


def build(cls, stored, **kwargs):
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    cache = cls(
        CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=P), **kwargs
    )
    next_id = 0
    for seq in stored:
        n = len(seq) // P * P
        cache.insert(InsertParams(key=RadixKey(seq[:n]), value=torch.arange(next_id, next_id + n)))
        next_id += n
    return cache


def time_matches(cache, queries, rounds: int) -> tuple[float, int]:
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    keys = [RadixKey(q) for q in queries]
    hits, per_round = 0, []
    for _ in range(rounds):
        start = time.perf_counter()
        hits = sum(cache.match_prefix(MatchPrefixParams(key=k)).device_prefix_len for k in keys)
        per_round.append((time.perf_counter() - start) / len(keys))
    return statistics.median(per_round), hits


def waste(page_sizes: list[int], samples: int = 100_000) -> dict[int, float]:
    rng = random.Random(1)
    lengths = [max(1, int(rng.lognormvariate(6.55, 0.9))) for _ in range(samples)]  # median ~700
    used = sum(lengths)
    return {p: 1 - used / sum(-(-n // p) * p for n in lengths) for p in page_sizes}


def plot(result: dict[int, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(list(result), [v * 100 for v in result.values()], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("page size (tokens)")
    ax.set_ylabel("KV memory in partly filled pages (%)")
    ax.set_title("Last-page waste, log-normal request lengths (median ~700)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from sglang.srt.mem_cache.radix_cache import RadixCache

    from runtime_ext.prefix_cache.sglang_backend import CombinedRadixCache

    stored, queries = workload()
    rows = {"sglang RadixCache": build(RadixCache, stored)}
    for c in (1, 4, 8):
        rows[f"combined C={c}"] = build(CombinedRadixCache, stored, combine_blocks=c)
    timed = {name: time_matches(cache, queries, args.rounds) for name, cache in rows.items()}
    base = timed["sglang RadixCache"][0]
    table = Table(
        title=f"match_prefix, 16-token pages: {len(queries)} queries, unit-aligned hits "
        f"(median of {args.rounds} rounds)"
    )
    for col in ("cache", "µs per match", "vs SGLang", "hit tokens"):
        table.add_column(col, justify="right")
    for name, (per, hits) in timed.items():
        table.add_row(name, f"{per * 1e6:.1f}", f"{per / base:.2f}×", f"{hits:,}")
    Console(width=120).print(table)
    result = waste([1, 2, 4, 8, 16, 32, 64, 128])
    table = Table(title="KV memory in partly filled last pages (100k log-normal request lengths)")
    table.add_column("page size", justify="right")
    table.add_column("wasted", justify="right")
    for p, w in result.items():
        table.add_row(str(p), f"{w:.2%}")
    Console(width=120).print(table)
    plot(result, ROOT / "docs" / "img" / "page_waste.png")


if __name__ == "__main__":
    main()

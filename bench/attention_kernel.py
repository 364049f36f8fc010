"""The compiled decode attention alone, as a decode step meets it: every layer's K/V pool cold.

Model-free: SmolLM2's attention shape (9 query heads over 3 KV heads of 64), 30 layers, each with
its own bf16 pool of ``--pool-rows`` rows; each request's rows on pages of 16 scattered over the
pool (SGLang's paged allocator hands out free pages in any order). Before each timed pass a
buffer larger than the last-level cache is written, so the pools come from memory as in a decode
step, where the weights (256 MiB) and the other layers' rows pass through the cache in between.
A pass = one call per layer; each round times every arm once, in turn. Arms:

- ``compiled``: ``attention_cpu.c`` as shipped (rows prefetched ``AHEAD`` rows on);
- ``no prefetch``: the same source built with ``-DAHEAD=0``;
- ``torch``: the path it replaces (``runtime_ext.attention.batched``: gather + masked SDPA).

The compiled arms must give identical outputs (checked). Prints µs per layer call, median over
``--rounds`` (min-max), and the ratios.

    .venv/bin/python bench/attention_kernel.py
    .venv/bin/python bench/attention_kernel.py --shapes 8x170 32x400 --rounds 15
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime_ext.attention.batched import attend  # noqa: E402
from runtime_ext.ops import attention_cpu, cpu_build  # noqa: E402

LAYERS, HQ, HKV, D, PAGE = 30, 9, 3, 64, 16


def scattered_locs(batch: int, length: int, pool_rows: int, seed: int) -> torch.Tensor:
    """``[batch, length]`` locations: each request's rows on its own pages, in shuffled page order."""
    pages = list(range(1, pool_rows // PAGE))  # page 0 holds SGLang's padding slot
    random.Random(seed).shuffle(pages)
    per = -(-length // PAGE)
    assert batch * per <= len(pages), "pool too small for the shape"
    rows = [[pages[r * per + t // PAGE] * PAGE + t % PAGE for t in range(length)] for r in range(batch)]
    return torch.tensor(rows, dtype=torch.int64)


def arms() -> dict:
    shipped = attention_cpu.KERNEL.lib()
    if shipped is None:
        raise SystemExit(f"no compiled attention here: {attention_cpu.reason()}")
    bare = cpu_build.load((*cpu_build.NATIVE_FLAGS, "-DAHEAD=0"), cpu_build.ATTENTION)
    return {"compiled": shipped.decode_attention_bf16, "no prefetch": bare.decode_attention_bf16}


def measure(shape: tuple[int, int], args: argparse.Namespace, pools, flush: torch.Tensor) -> dict[str, list[float]]:
    batch, length = shape
    locs = scattered_locs(batch, length, args.pool_rows, seed=batch * 7919 + length)
    lens = torch.full((batch,), length, dtype=torch.int64)
    valid = torch.ones(batch, length, dtype=torch.bool)
    q = torch.randn(batch, HQ, D, dtype=torch.bfloat16)
    compiled = arms()
    outs = {name: torch.empty(batch, HQ, D, dtype=torch.bfloat16) for name in compiled}
    times: dict[str, list[float]] = {name: [] for name in [*compiled, "torch"]}
    for _ in range(args.rounds):
        for name in times:
            flush.add_(1)  # the pools leave the cache
            t0 = time.perf_counter()
            for k, v in pools:
                if name == "torch":
                    attend(q, k[locs], v[locs], valid, D**-0.5)
                else:
                    rc = compiled[name](
                        outs[name].data_ptr(), q.data_ptr(), q.stride(0), k.data_ptr(), v.data_ptr(), args.pool_rows,
                        locs.data_ptr(), lens.data_ptr(), batch, length, HQ, HKV, D, D, D**-0.5,
                    )  # fmt: skip
                    assert rc == 0, rc
            times[name].append((time.perf_counter() - t0) / len(pools) * 1e6)
    assert torch.equal(outs["compiled"], outs["no prefetch"]), "prefetching changed the output"
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["1x170", "8x170", "32x170", "32x400"], help="BATCHxLENGTH")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pool-rows", type=int, default=32768, help="rows per layer's pool (the serving default)")
    parser.add_argument("--flush-mib", type=int, default=1024, help="bytes written between passes (> the L3)")
    args = parser.parse_args()
    torch.manual_seed(0)
    pools = [tuple(torch.randn(args.pool_rows, HKV, D, dtype=torch.bfloat16) for _ in range(2)) for _ in range(LAYERS)]
    flush = torch.zeros(args.flush_mib << 18, dtype=torch.float32)
    table = Table(title=f"decode attention per layer call, pools cold (µs; median of {args.rounds}, min–max)")
    for col in ["batch × rows", "compiled", "no prefetch", "torch", "no prefetch / compiled", "torch / compiled"]:
        table.add_column(col, justify="right")
    for text in args.shapes:
        batch, length = (int(x) for x in text.split("x"))
        times = measure((batch, length), args, pools, flush)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        cells = [f"{med[n]:.0f} ({min(ts):.0f}–{max(ts):.0f})" for n, ts in times.items()]
        ratios = [f"{med['no prefetch'] / med['compiled']:.2f}×", f"{med['torch'] / med['compiled']:.2f}×"]
        table.add_row(text, *cells, *ratios)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()

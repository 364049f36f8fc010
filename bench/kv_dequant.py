"""A decode step's KV read, as ``runtime_ext.ops.kv_ref`` does it now against the forms it replaced,
side by side in one process; same results (checked), median time per call:
- gather: ``take_rows`` (``index_select``) vs advanced indexing ``buffer[locs]``, bf16 and int8;
- C8 dequantize: int8 widened to a new float32 tensor and scaled in place vs
  ``(q.float() * scale).to(dtype)``.

    .venv/bin/python bench/kv_dequant.py            # rows = batch x 560 (a 512-token window + decode), 3 KV heads x 64

Run it with and without ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824``
(``engine.host_malloc``) to see what the allocator adds to each call.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime_ext.ops import kv_ref  # noqa: E402

HEADS, DIM, ROWS_PER_REQUEST = 3, 64, 560


def before_per_token(q, scale, dtype):
    return (q.float() * scale.float().unsqueeze(-1)).to(dtype)


def before_static(q, scale, dtype):
    return (q.float() * scale).to(dtype)


def timed_ms(fn, reps: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.manual_seed(0)
    t = Table(title=f"KV read per call, {HEADS} heads x {DIM}, {torch.get_num_threads()} threads")
    for col in ("step", "batch", "rows", "before ms", "now ms", "now / before", "equal"):
        t.add_column(col, justify="right")
    for batch in (1, 8, 32):
        rows = batch * ROWS_PER_REQUEST
        locs = (torch.randperm(rows) + 1).reshape(batch, ROWS_PER_REQUEST)
        q = torch.randint(-127, 128, (rows + 1, HEADS, DIM), dtype=torch.int8)
        pool = torch.randn(rows + 1, HEADS, DIM, dtype=torch.bfloat16)
        cases = {
            "gather bf16": (lambda: pool[locs], lambda: kv_ref.take_rows(pool, locs)),
            "gather int8": (lambda: q[locs], lambda: kv_ref.take_rows(q, locs)),
        }
        per_token, static = torch.rand(rows + 1, HEADS) * 0.05, torch.rand(HEADS, DIM) * 0.05
        bf16 = torch.bfloat16
        cases["dequantize per-token (C8-D)"] = (
            lambda: before_per_token(q, per_token, bf16),
            lambda: kv_ref.dequantize_per_token(q, per_token, bf16),
        )
        cases["dequantize static (C8-S)"] = (
            lambda: before_static(q, static, bf16),
            lambda: kv_ref.dequantize_static(q, static, bf16),
        )
        for step, (before, now) in cases.items():
            same = torch.equal(before(), now())
            b, n = timed_ms(before), timed_ms(now)
            t.add_row(step, str(batch), str(rows), f"{b:.3f}", f"{n:.3f}", f"{n / b:.2f}", str(same))
        t.add_section()
    Console(width=120).print(t)


if __name__ == "__main__":
    main()

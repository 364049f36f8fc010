"""Decode attention over the bf16 KV pool on the CPU, one compiled call per layer (``attention_cpu.c``).

The torch path (``runtime_ext.attention.batched``) gathers each layer's rows of the batch into a
padded copy, converts, and runs SDPA with a length mask: five to eight small ops per layer, 0.4 ms at
batch 1 on SmolLM2 (``docs/benchmarks.md``, "Where a decode step goes"). Here each request's rows
are read in place from the pool, its query heads sharing a KV head read each row once, and the
softmax and the weighted sum run in float32 in one call. ``runtime_ext.attention.native`` calls it
for a decode batch when ``takes`` holds (a bf16 pool without a quant method, bf16 queries, head dims a
multiple of 16, ≤ 16 query heads per KV head), else the torch path runs; ``CALLS`` counts both
(the plugin report's ``decode_kernels`` section, ``structserve_decode_kernel_calls`` in ``/metrics``).

Bounds: a location outside the pool raises ``IndexError`` naming it before any row is read.
"""

from __future__ import annotations

import torch

from runtime_ext.ops.cpu_build import ATTENTION, Kernel

BAD_LOC, NO_MEMORY = -100, -104  # attention_cpu.c's statuses the caller maps (the others: a call takes() refuses)
NATIVE, REFERENCE = 0, 1
KERNEL = Kernel(ATTENTION)
CALLS = KERNEL.calls  # calls the compiled loop ran; decode calls on a pool it did not take
status, reason, report = KERNEL.status, KERNEL.reason, KERNEL.report


def takes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """``q[B, Hq, D]`` (heads contiguous) against the pool's ``k[rows, Hkv, D]``, ``v[rows, Hkv, Dv]``."""
    if any(t.device.type != "cpu" or t.dtype != torch.bfloat16 for t in (q, k, v)):
        return False
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or not (k.is_contiguous() and v.is_contiguous()):
        return False
    b, hq, d = q.shape
    rows, hkv, dk = k.shape
    if dk != d or v.shape[:2] != (rows, hkv) or q.stride(2) != 1 or q.stride(1) != d:
        return False
    dv = v.shape[2]
    return hkv > 0 and hq % hkv == 0 and hq // hkv <= 16 and d % 16 == 0 == dv % 16 and max(d, dv) <= 256


def decode(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, locs: torch.Tensor, lens: torch.Tensor, scale: float
) -> torch.Tensor | None:
    """``[B, Hq, Dv]``: each request's query against its ``lens[b]`` rows at ``locs[b, :lens[b]]``
    (int64, ``[B, L]`` contiguous); None when the compiled loop does not take the call."""
    lib = KERNEL.lib()
    if lib is None or not takes(q, k, v):
        CALLS[REFERENCE] += 1
        return None
    b, hq, d = q.shape
    rows, hkv, _ = k.shape
    dv = v.shape[2]
    locs, lens = locs.to(torch.int64).contiguous(), lens.to(torch.int64).contiguous()
    out = torch.empty((b, hq, dv), dtype=torch.bfloat16)
    status_code = lib.decode_attention_bf16(
        out.data_ptr(), q.data_ptr(), q.stride(0), k.data_ptr(), v.data_ptr(), rows,
        locs.data_ptr(), lens.data_ptr(), b, locs.shape[1], hq, hkv, d, dv, scale,
    )  # fmt: skip
    if status_code == BAD_LOC:
        flat = torch.cat([locs[i, : int(n)] for i, n in enumerate(lens.tolist())])
        bad = flat[(flat < 0) | (flat >= rows)]
        raise IndexError(f"KV cache location {int(bad[0])} is outside the pool's rows [0, {rows})")
    if status_code == NO_MEMORY:
        raise MemoryError(f"decode attention: no memory for the scores of {int(lens.max())} rows")
    if status_code != 0:
        raise RuntimeError(f"decode_attention_bf16 refused a call takes() accepted (status {status_code})")
    CALLS[NATIVE] += 1
    return out

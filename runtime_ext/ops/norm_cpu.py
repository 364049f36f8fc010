"""SGLang's RMSNorm and rotary embedding on bfloat16 CPU rows, one compiled call each (``norm_cpu.c``).

SGLang's ``RMSNorm.forward_native`` (what its CPU path runs without AMX) takes eight to ten small torch
ops per call, twice per layer: about 7 ms of a 60 ms decode step of SmolLM2 with RoPE
(``docs/benchmarks.md``, "Where a decode step goes"). ``rmsnorm`` does the same arithmetic per row in
one call when ``takes`` holds (bf16 CPU tensors, 2-D contiguous rows, a bf16 weight of the row's
width), else returns None and the caller runs torch's. ``rope`` likewise replaces
``RotaryEmbedding.forward_native`` (index the cos/sin cache, split, six bf16 ops, concatenate: bit for
bit the same). ``CALLS`` counts both kernels' calls.
"""

from __future__ import annotations

import torch

from runtime_ext.ops.cpu_build import NORM, Kernel

NATIVE, REFERENCE = 0, 1
KERNEL = Kernel(NORM)
CALLS = KERNEL.calls  # calls the compiled loop ran; calls on bf16 rows it could not run (no library)
status, reason, report = KERNEL.status, KERNEL.reason, KERNEL.report


def takes(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor) -> bool:
    tensors = (x, weight) if residual is None else (x, weight, residual)
    if any(t.device.type != "cpu" or t.dtype != torch.bfloat16 or not t.is_contiguous() for t in tensors):
        return False
    if x.dim() != 2 or weight.shape != (x.shape[1],) or not 1 <= x.shape[1] <= 16384:
        return False
    return residual is None or residual.shape == x.shape


def rmsnorm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float, cast_before: bool
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """``(out, new residual)`` as ``forward_native`` computes them (new residual None without a
    residual), or None when the compiled loop does not take the call."""
    if not takes(x, residual, weight):
        return None
    lib = KERNEL.runnable()
    if lib is None:
        return None
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else None
    status_code = lib.rmsnorm_bf16(
        out.data_ptr(), res_out.data_ptr() if res_out is not None else None, x.data_ptr(),
        residual.data_ptr() if residual is not None else None, weight.data_ptr(),
        x.shape[0], x.shape[1], eps, int(cast_before),
    )  # fmt: skip
    if status_code != 0:
        raise RuntimeError(f"rmsnorm_bf16 refused a call takes() accepted (status {status_code})")
    CALLS[NATIVE] += 1
    return out, res_out


def rope_takes(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor, head_size: int) -> bool:
    """``q[T, Hq · hs]`` and ``k[T, Hk · hs]`` bf16 CPU rows (row stride free, elements contiguous),
    ``positions[T]`` int64, ``cache[P, rot]`` float32 or bf16 contiguous."""
    if any(t.device.type != "cpu" for t in (positions, q, k, cache)) or q.dtype != torch.bfloat16 != k.dtype:
        return False
    if q.dim() != 2 or k.dim() != 2 or q.stride(1) != 1 or k.stride(1) != 1 or q.shape[0] != k.shape[0]:
        return False
    if q.shape[1] % head_size or k.shape[1] % head_size or positions.dtype != torch.int64:
        return False
    if positions.shape != (q.shape[0],) or not positions.is_contiguous():
        return False
    rot = cache.shape[-1] if cache.dim() == 2 else 0
    return cache.dtype in (torch.float32, torch.bfloat16) and cache.is_contiguous() and 2 <= rot <= head_size


def rope(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor, head_size: int, neox: bool
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(q, k)`` rotated as ``RotaryEmbedding.forward_native`` rotates them (new contiguous tensors,
    bit for bit), or None when the compiled loop does not take the call."""
    if not rope_takes(positions, q, k, cache, head_size):
        return None
    lib = KERNEL.runnable()
    if lib is None:
        return None
    q_out, k_out = torch.empty(q.shape, dtype=q.dtype), torch.empty(k.shape, dtype=k.dtype)
    status_code = lib.rope_bf16(
        q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0),
        positions.data_ptr(), cache.shape[0], cache.data_ptr(), int(cache.dtype == torch.bfloat16), q.shape[0],
        q.shape[1] // head_size, k.shape[1] // head_size, head_size, cache.shape[1], int(neox),
    )  # fmt: skip
    if status_code == -100:
        raise IndexError(f"a rotary position is outside the cos/sin cache [0, {cache.shape[0]})")
    if status_code != 0:
        raise RuntimeError(f"rope_bf16 refused a call rope_takes() accepted (status {status_code})")
    CALLS[NATIVE] += 1
    return q_out, k_out

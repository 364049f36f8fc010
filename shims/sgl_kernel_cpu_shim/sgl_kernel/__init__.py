"""Pure-torch stand-in for ``sgl_kernel`` on CPUs without AMX.

SGLang's CPU engine imports ``sgl_kernel`` unconditionally, but the CPU build
(``sglang-kernel-cpu``) is not on PyPI and its fast paths need Intel AMX anyway.
On a non-AMX CPU every layer takes ``forward_native``, so only these are used:

* ``copy_all_layer_kv_cache_cpu`` -- KV slot moves (retraction / speculative paths);
  implemented here with byte copies between rows of each layer buffer.
* ``torch.ops.sgl_kernel.init_cpu_threads_env`` -- sets torch's thread count.
* ``torch.ops.sgl_kernel.murmur_hash32_cpu`` -- the hash behind SGLang's seeded
  sampler (``multinomial_with_seed``), same bits as its triton kernel.

Any other ``from sgl_kernel import X`` succeeds, and calling ``X`` raises
``NotImplementedError`` naming it. ``convert_weight_packed`` is deliberately
absent: SGLang probes for it to detect AMX support.

The setup script installs this package only when no real ``sgl_kernel`` imports.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import torch

__version__ = "0.0.2+structserve.shim"
IS_STRUCTSERVE_SHIM = True


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Copy row ``src_loc[i]`` onto row ``tgt_loc[i]`` in every buffer.

    ``data_ptrs[b]`` is the base address of buffer ``b`` and ``strides[b]`` its row
    size in bytes (the contract of SGLang's triton ``copy_all_layer_kv_cache_tiled``).
    Rows are copied in order, so overlapping source/target sets behave like the
    sequential kernel.
    """
    ptrs = [int(p) for p in data_ptrs.tolist()]
    row_bytes = [int(s) for s in strides.tolist()]
    pairs = list(zip(src_loc.tolist(), tgt_loc.tolist()))
    for base, stride in zip(ptrs, row_bytes):
        for src, tgt in pairs:
            if src != tgt:
                ctypes.memmove(base + int(tgt) * stride, base + int(src) * stride, stride)


_lib = torch.library.Library("sgl_kernel", "DEF")
_lib.define("init_cpu_threads_env(int[] cpu_ids) -> str")


def _init_cpu_threads_env(cpu_ids: list[int]) -> str:
    torch.set_num_threads(max(1, len(cpu_ids)))
    return f"sgl_kernel shim: {torch.get_num_threads()} torch threads for cpus {list(cpu_ids)}"


_lib.impl("init_cpu_threads_env", _init_cpu_threads_env, "CompositeExplicitAutograd")


_M32 = 0xFFFFFFFF
_lib.define("murmur_hash32_cpu(Tensor seed, Tensor positions, Tensor col_indices) -> Tensor")


def _rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    k = (k * 0xCC9E2D51) & _M32  # int64 products wrap; the low 32 bits stay exact
    k = (_rotl32(k, 15) * 0x1B873593) & _M32
    h = _rotl32(h ^ k, 13)
    return (h * 5 + 0xE6546B64) & _M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def _murmur_hash32_cpu(seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor) -> torch.Tensor:
    """MurmurHash3 of (seed low, seed high, position, column) -> uint32 ``[n, m]``."""
    s = seed.to(torch.int64).view(-1, 1)
    h = torch.zeros_like(s)
    h = _mix(h, s & _M32)
    h = _mix(h, (s >> 32) & _M32)
    h = _mix(h, positions.to(torch.int64).view(-1, 1) & _M32)
    h = _mix(h.expand(-1, col_indices.numel()), col_indices.to(torch.int64).view(1, -1) & _M32)
    return _fmix32(h ^ 16).to(torch.uint32)


_lib.impl("murmur_hash32_cpu", _murmur_hash32_cpu, "CPU")


@torch.library.register_fake("sgl_kernel::murmur_hash32_cpu")
def _murmur_hash32_fake(seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor) -> torch.Tensor:
    return seed.new_empty((seed.shape[0], col_indices.shape[0]), dtype=torch.uint32)


def _missing(name: str) -> Callable[..., Any]:
    def _raise(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not provided by the structserve CPU shim; "
            "install a real sgl_kernel build for this code path"
        )

    _raise.__name__ = name
    return _raise


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name == "convert_weight_packed":
        raise AttributeError(name)
    return _missing(name)

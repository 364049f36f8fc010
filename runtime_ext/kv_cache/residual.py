"""INT4 residual side buffer for C8-S outlier vectors (one per layer and K-or-V).

A (token, head) vector whose relative INT8 error ε = ‖x − deq8(q8(x))‖/‖x‖ exceeds τ also
stores ``r = x − deq8`` as INT4 (``kv_quantize_residual``) in a *slot* of this buffer; reads
return ``deq8 + deq4``. The buffer has a fixed number of slots (allocated with the pool);
the index is sparse: ``keys`` (sorted int32 ``loc * H + head``) and the int32 slot of each.

Contracts:
- ``store(locs, x, deq8)`` first releases every slot held by ``locs`` (a re-used page never
  reads a stale residual), then takes slots for the new outliers. When no slot is free the
  vector keeps its INT8 value only and is counted in ``dropped`` (never an error).
- ``release(locs)`` returns the slots of those token locations (the allocator calls it when
  pages are freed; ``clear()`` empties everything).
- ``apply(locs, values)`` adds the residuals of the vectors at ``locs`` to ``values[T, H, D]``
  in place (``locs`` may repeat and come in any order).
"""

from __future__ import annotations

import torch

from runtime_ext.kv_cache.sizing import residual_slot_bytes
from runtime_ext.ops import get_op


class ResidualSlots:
    def __init__(self, capacity: int, heads: int, head_dim: int, tau: float, device: torch.device | str) -> None:
        self.heads, self.tau = heads, tau
        self.packed = torch.zeros((capacity, head_dim // 2), dtype=torch.uint8, device=device)
        self.scale = torch.zeros((capacity,), dtype=torch.float16, device=device)
        self.keys = torch.empty(0, dtype=torch.int32, device=device)
        self.slots = torch.empty(0, dtype=torch.int32, device=device)
        self.free = torch.arange(capacity, dtype=torch.int32, device=device)
        self.seen = self.outliers = self.dropped = 0

    @property
    def capacity(self) -> int:
        return int(self.packed.shape[0])

    @property
    def used(self) -> int:
        return int(self.keys.numel())

    def nbytes(self) -> int:
        return self.capacity * residual_slot_bytes(self.packed.shape[1] * 2)

    def release(self, locs: torch.Tensor) -> None:
        if not self.keys.numel() or not locs.numel():
            return
        if not get_op("kv_keys_on", locs.device.type)(self.keys, self.heads, locs):
            return
        gone = torch.isin(self.keys // self.heads, locs.to(self.keys.device, torch.int32))
        if bool(gone.any()):
            self.free = torch.cat((self.slots[gone], self.free))
            self.keys, self.slots = self.keys[~gone], self.slots[~gone]

    def clear(self) -> None:
        self.free = torch.cat((self.slots, self.free))
        self.keys, self.slots = self.keys[:0], self.slots[:0]

    def store(self, locs: torch.Tensor, x: torch.Tensor, deq8: torch.Tensor) -> None:
        """``x``/``deq8``: ``[T, H, D]`` for the tokens written at ``locs[T]``."""
        from runtime_ext.ops.kv_ref import relative_error

        self.release(locs)
        outlier = relative_error(x, deq8) > self.tau  # [T, H]
        self.seen += outlier.numel()
        token, head = outlier.nonzero(as_tuple=True)
        n = int(token.numel())
        self.outliers += n
        if n == 0:
            return
        take = min(n, int(self.free.numel()))
        self.dropped += n - take
        token, head = token[:take], head[:take]
        slots, self.free = self.free[:take], self.free[take:]
        residual = x[token, head].float() - deq8[token, head].float()
        packed, scale = get_op("kv_quantize_residual", x.device.type)(residual)
        self.packed[slots], self.scale[slots] = packed, scale.to(torch.float16)
        keys = torch.cat((self.keys, (locs.to(torch.int32)[token] * self.heads + head).to(torch.int32)))
        order = keys.argsort()
        self.keys, self.slots = keys[order], torch.cat((self.slots, slots))[order]

    def apply(self, locs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        if not self.keys.numel():
            return values
        add = get_op("kv_residual_add", values.device.type)
        return add(values, locs, self.keys, self.slots, self.packed, self.scale)

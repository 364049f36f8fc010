"""INT4 residual side buffer for C8-S outlier vectors (one per layer and K-or-V).

A (token, head) vector whose relative INT8 error ε = ‖x − deq8(q8(x))‖/‖x‖ exceeds τ also
stores ``r = x − deq8`` as INT4 (``kv_ref.quantize_residual``) in a *slot* of this buffer; reads
return ``deq8 + deq4``. The buffer has a fixed number of slots (allocated with the pool);
the index is sparse: ``keys`` (sorted int32 ``loc * H + head``) and the int32 slot of each.

Every array is allocated once at its full size, so the compiled CPU calls (``ops.kv_cpu``) can
update it in place: ``_keys``/``_slots`` hold ``used`` entries, ``_free`` is a stack of free slots
(taken from the top) holding ``nfree``; ``counts`` = (used, nfree, outliers, dropped).

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

USED, NFREE, OUTLIERS, DROPPED = range(4)


class ResidualSlots:
    def __init__(self, capacity: int, heads: int, head_dim: int, tau: float, device: torch.device | str) -> None:
        self.heads, self.tau = heads, tau
        self.kind = torch.device(device).type  # picks the ops table (the twin's "npu" tensors live on the CPU)
        self.packed = torch.zeros((capacity, head_dim // 2), dtype=torch.uint8, device=device)
        self.scale = torch.zeros((capacity,), dtype=torch.float16, device=device)
        self._keys = torch.zeros(capacity, dtype=torch.int32, device=device)
        self._slots = torch.zeros(capacity, dtype=torch.int32, device=device)
        self._free = torch.arange(capacity - 1, -1, -1, dtype=torch.int32, device=device)  # slot 0 on top
        self.counts = torch.tensor([0, capacity, 0, 0], dtype=torch.int64)  # on the host: read every step
        self.seen = 0

    @property
    def capacity(self) -> int:
        return int(self.packed.shape[0])

    @property
    def used(self) -> int:
        return int(self.counts[USED])

    @property
    def outliers(self) -> int:
        return int(self.counts[OUTLIERS])

    @property
    def dropped(self) -> int:
        return int(self.counts[DROPPED])

    @property
    def keys(self) -> torch.Tensor:
        return self._keys[: self.used]

    @property
    def slots(self) -> torch.Tensor:
        return self._slots[: self.used]

    @property
    def free(self) -> torch.Tensor:
        return self._free[: int(self.counts[NFREE])]

    def nbytes(self) -> int:
        return self.capacity * residual_slot_bytes(self.packed.shape[1] * 2)

    def _state(self) -> tuple:
        return self._keys, self._slots, self._free, self.counts, self.packed, self.scale

    def release(self, locs: torch.Tensor) -> None:
        if self.used and locs.numel():
            get_op("kv_residual_release", self.kind)(*self._state()[:4], self.heads, locs.reshape(-1))

    def clear(self) -> None:
        used, nfree = self.used, int(self.counts[NFREE])
        self._free[nfree : nfree + used] = self._slots[:used]
        self.counts[USED], self.counts[NFREE] = 0, nfree + used

    def store(self, locs: torch.Tensor, x: torch.Tensor, deq8: torch.Tensor) -> None:
        """``x``/``deq8``: ``[T, H, D]`` for the tokens written at ``locs[T]``."""
        self.seen += x.shape[0] * x.shape[1]
        get_op("kv_residual_store", self.kind)(*self._state(), self.heads, self.tau, locs.reshape(-1), x, deq8)

    def apply(self, locs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        if not self.used:
            return values
        add = get_op("kv_residual_add", self.kind)
        return add(values, locs, self.keys, self.slots, self.packed, self.scale)

"""The per-head Hadamard rotation a C8 method applies to what it stores (imports torch).

``kv_rotation`` (``auto`` resolved per method: ``config.resolve_rotation``). With ``k`` a C8
method quantizes ``k · H`` instead of ``k`` (``H`` the normalized Hadamard matrix of the head dim,
``ops.kv_ref.hadamard``): a key's few large channels spread over all channels, so the per-token
INT8 scale (C8-D) stops spending its range on them. ``kv`` rotates V too. (Static per-channel
scales are calibrated in the rotated space; there the measured effect was within noise, so
``auto`` leaves them unrotated and existing calibration files valid.) Nothing extra is
stored: the rotated vector has the same size and the matrix is rebuilt from the head dim.

Readers see the cache in one of two ways:
- runtime_ext's attention backend reads the rotated rows as they are and rotates the query
  instead (``(q H)(k H)ᵀ = q kᵀ``), and rotates the output back when V is rotated
  (``softmax(·)(v H) Hᵀ = softmax(·) v``): two ``[n, heads, D] × [D, D]`` products per layer
  instead of one per cached row;
- any other reader (SGLang's own backends, the NPU's through the PLAIN access) gets
  ``dequantize_kv_tensor``, which rotates the rows back (``H`` is its own inverse).
"""

from __future__ import annotations

from typing import Any

import torch

from runtime_ext.config import StoredRotation
from runtime_ext.ops import get_op, kv_ref


class Rotation:
    """Which sides are rotated, and the matrix per device."""

    def __init__(self, which: StoredRotation) -> None:
        self.which = which
        self.keys, self.values = which in ("k", "kv"), which == "kv"
        self._matrices: dict[tuple[int, str], torch.Tensor] = {}

    def __bool__(self) -> bool:
        return self.keys or self.values

    def matrix(self, head_dim: int, device: Any) -> torch.Tensor:
        key = (head_dim, str(device))
        if key not in self._matrices:
            self._matrices[key] = kv_ref.hadamard(head_dim, torch.float32, device)
        return self._matrices[key]

    def rotate(self, x: torch.Tensor, dtype: torch.dtype | None = None, kind: str | None = None) -> torch.Tensor:
        """``x[..., D] · H`` (also the inverse), through the ops table of ``kind`` (default ``x``'s device)."""
        h = self.matrix(x.shape[-1], x.device)
        return get_op("kv_rotate", kind or x.device.type)(x, h, dtype)

    def side(self, is_key: bool) -> bool:
        return self.keys if is_key else self.values

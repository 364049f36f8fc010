"""What one token of KV cache costs in each mode, from what is actually stored (pure logic).

- ``bf16``: K and V in 2-byte floats: ``2 * L * H * D * 2``.
- ``c8_dynamic``: int8 values plus one float16 scale per token, head, K-or-V:
  ``2 * L * (H * D + 2 * H)``.
- ``c8_static``: int8 values only (the scales are per layer, not per token): ``2 * L * H * D``.
- ``c8_static_residual``: ``c8_static`` plus the residual side buffer's share: slots for
  ``RESIDUAL_HEADROOM ×`` the calibrated outlier rate of the vectors (at least
  ``RESIDUAL_MIN_RATE``), each slot holding D/2
  packed INT4 bytes, a float16 scale, its index entry (int32 key + int32 slot id) and its entry
  in the free-slot stack (int32).

``tokens_for_budget`` turns a KV byte budget into a pool size (whole pages).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

KVMode = Literal["bf16", "c8_dynamic", "c8_static", "c8_static_residual"]
KV_MODES: tuple[KVMode, ...] = get_args(KVMode)
RESIDUAL_HEADROOM = 6.0  # slots reserved per calibrated outlier (held-out text runs ~4x the calibration rate)
RESIDUAL_MIN_RATE = 0.01  # slots for at least 1% of the vectors, whatever the calibration saw
RESIDUAL_SLOT_OVERHEAD = 2 + 4 + 4 + 4  # float16 scale, int32 key, int32 slot id, int32 free-stack entry


def residual_rate(outlier_rate: float) -> float:
    """Share of vectors the side buffer has slots for."""
    return max(outlier_rate * RESIDUAL_HEADROOM, RESIDUAL_MIN_RATE)


def residual_slots(tokens: int, heads: int, outlier_rate: float) -> int:
    """Slots reserved for one layer's K (or V) side of a pool of ``tokens``."""
    return max(1, math.ceil(tokens * heads * residual_rate(outlier_rate)))


def residual_slot_bytes(head_dim: int) -> int:
    return head_dim // 2 + RESIDUAL_SLOT_OVERHEAD


def cell_bytes(mode: KVMode | str, layers: int, heads: int, head_dim: int, outlier_rate: float = 0.0) -> int:
    """Bytes per token of KV cache (all layers, K and V)."""
    if mode == "bf16":
        return 2 * layers * heads * head_dim * 2
    if mode == "c8_dynamic":
        return 2 * layers * (heads * head_dim + 2 * heads)
    if mode == "c8_static":
        return 2 * layers * heads * head_dim
    if mode == "c8_static_residual":
        share = heads * residual_rate(outlier_rate) * residual_slot_bytes(head_dim)
        return 2 * layers * heads * head_dim + math.ceil(2 * layers * share)
    raise ValueError(f"unknown KV cache mode {mode!r}; valid: {', '.join(KV_MODES)}")


def tokens_for_budget(budget_bytes: int, cell: int, page_size: int) -> int:
    """The largest whole-page token count whose KV fits in ``budget_bytes``."""
    pages = budget_bytes // (cell * page_size)
    if pages < 1:
        raise ValueError(
            f"a KV budget of {budget_bytes} bytes holds no page of {page_size} tokens at {cell} bytes per token"
        )
    return pages * page_size

"""C8 KV-cache quantization math: the torch reference path (runs on any device).

Shapes: a K or V slice is ``x[T, H, D]`` (tokens, heads, head dim). All methods are
symmetric with zero-point 0.

- **C8-D** (dynamic): per token and head, ``scale = absmax / 127``; ``q = round(x / scale)``.
  A zero vector gets scale 0 and q 0 (dequantizes to exact zeros).
- **C8-S** (static): per layer / K-or-V / head / channel scales ``s[H, D]`` from
  calibration; ``q = clamp(round(x / s), -127, 127)``.
- **Residual** (for C8-S outliers): ``r = x - deq8(q8(x))`` stored as INT4 (values in
  [-7, 7], two per byte, low nibble first) with one scale per vector ``absmax(r) / 7``.
  Reads return ``deq8 + deq4``.

- **Rotation** (optional, before either C8 method): ``x @ Hd`` with ``Hd`` the normalized
  Sylvester Hadamard matrix of the head dim (orthogonal and symmetric, so it is its own
  inverse). Outlier channels of a key spread over all channels, so a per-token scale stops
  spending the INT8 range on a few of them. ``(q Hd)(k Hd)ᵀ = q kᵀ``: attention can read
  rotated keys with a rotated query, and rotated values with the output rotated back.

A NaN or inf in the cache would poison every later step silently, and a float16 scale that
overflows stores ``inf``. So the stores keep neither: ``unstorable_rows`` finds the tokens with a
non-finite value (or, with float16 scales, an absmax whose scale overflows), the store writes
those tokens as zeros (scale 0) and returns the mask; the caller fails the requests that own
them (``runtime_ext/kv_cache/poison.py``). ``quantize_*`` called directly still refuse
non-finite input (``ValueError``).
"""

from __future__ import annotations

import torch

INT8_MAX = 127
INT4_MAX = 7


def hadamard(n: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> torch.Tensor:
    """The normalized Sylvester Hadamard matrix ``[n, n]`` (``n`` a power of two): ``H = Hᵀ = H⁻¹``."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"a Hadamard rotation needs a power-of-two head dim, got {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return (h / n**0.5).to(device=device, dtype=dtype)


def rotate(x: torch.Tensor, h: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x[..., D] @ h`` computed in float32, returned in ``dtype`` (default ``x``'s); ``h`` is
    symmetric and orthogonal, so the same call rotates back."""
    return (x.float() @ h.float()).to(dtype or x.dtype)


def _check_finite(x: torch.Tensor, what: str) -> None:
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{what} holds NaN or inf; refusing to store it in the KV cache")


def quantize_per_token(x: torch.Tensor, scale_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """C8-D: ``x[..., D]`` -> (int8 ``q[..., D]``, ``scale[...]`` in ``scale_dtype``).

    A float16 scale is rounded *up* (never below absmax/127), so values never clip and the
    error stays within half a quantization step of the stored scale."""
    _check_finite(x, "the KV tensor")
    xf = x.float()
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    if scale_dtype != torch.float32:
        scale = (scale * (1 + 2.0**-9)).to(scale_dtype).float()
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe.unsqueeze(-1)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale.to(scale_dtype)


def take_rows(buffer: torch.Tensor, locs: torch.Tensor) -> torch.Tensor:
    """``buffer[locs]`` (rows of a ``[size, ...]`` pool buffer at an index tensor of any shape)
    through ``index_select``: the same result, 4× (bf16) to 10× (int8) faster than advanced
    indexing for a batch-32 decode read on this CPU (``bench/kv_dequant.py``)."""
    flat = locs.reshape(-1)
    if flat.dtype not in (torch.int32, torch.int64):
        flat = flat.long()
    return buffer.index_select(0, flat).view(*locs.shape, *buffer.shape[1:])


def _widened(q: torch.Tensor) -> torch.Tensor:
    """``q`` as a new float32 tensor, which the callers scale in place (``mul_``): one fewer
    full-size temporary than ``q.float() * scale`` (``bench/kv_dequant.py``)."""
    return q.to(torch.float32, copy=True)


def dequantize_per_token(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _widened(q).mul_(scale.float().unsqueeze(-1)).to(dtype)


def _scale16(absmax: torch.Tensor) -> torch.Tensor:
    """The float16 C8-D scale of ``absmax`` (rounded up: never below absmax / 127)."""
    return (absmax / INT8_MAX * (1 + 2.0**-9)).to(torch.float16)


def unstorable_rows(x: torch.Tensor, float16_scales: bool) -> torch.Tensor:
    """``bad[T]`` for ``x[T, H, D]``: a token holding a NaN or inf, or (``float16_scales``) one
    whose per-head scale absmax / 127 overflows float16 (absmax above ~8.3e6). No host sync."""
    xf = x.float().reshape(x.shape[0], -1, x.shape[-1])
    bad = ~torch.isfinite(xf).flatten(1).all(1)
    if float16_scales:
        bad |= torch.isinf(_scale16(xf.abs().amax(-1))).any(-1)
    return bad


def zero_rows(x: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """``x`` with the tokens ``bad`` set to zero (stored as exact zeros, scale 0)."""
    return x.masked_fill(bad.reshape(-1, *([1] * (x.dim() - 1))), 0)


def _storable(x: torch.Tensor, float16_scales: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``x`` with unstorable tokens zeroed, and their mask (None when every token is storable)."""
    bad = unstorable_rows(x, float16_scales)
    if not bool(bad.any()):
        return x, None
    return zero_rows(x, bad), bad


def store_per_token(buf: torch.Tensor, scale_buf: torch.Tensor, loc, x: torch.Tensor, quantize=None):
    """Quantize ``x[T, H, D]`` per token into the pool rows ``loc`` and their float16 scales.
    Returns the mask of tokens stored as zeros instead (None: all stored as given)."""
    x, bad = _storable(x, scale_buf.dtype == torch.float16)
    q, s = (quantize or quantize_per_token)(x, scale_buf.dtype)
    buf[loc] = q
    scale_buf[loc] = s
    return bad


def gather_dequantize_per_token(buffer: torch.Tensor, scales: torch.Tensor, locs: torch.Tensor, dtype: torch.dtype):
    """C8-D rows ``locs`` of a pool side: ``dequantize_per_token`` of the gathered rows and scales."""
    return dequantize_per_token(take_rows(buffer, locs), take_rows(scales, locs), dtype)


def quantize_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """C8-S: ``x[T, H, D]`` with per-channel ``scale[H, D]`` (> 0) -> int8, clamped."""
    _check_finite(x, "the KV tensor")
    return torch.round(x.float() / scale).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)


def store_static(buf: torch.Tensor, scale: torch.Tensor, loc, x: torch.Tensor, quantize=None):
    """Quantize ``x[T, H, D]`` with the per-channel ``scale[H, D]`` into the pool rows ``loc``.
    Returns the mask of non-finite tokens stored as zeros instead (None: all stored as given)."""
    x, bad = _storable(x, False)
    buf[loc] = (quantize or quantize_static)(x, scale)
    return bad


def dequantize_static(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _widened(q).mul_(scale).to(dtype)


def gather_dequantize_static(buffer: torch.Tensor, scale: torch.Tensor, locs: torch.Tensor, dtype: torch.dtype):
    """C8-S rows ``locs`` of a pool side, dequantized with its per-channel ``scale[H, D]``."""
    return dequantize_static(take_rows(buffer, locs), scale, dtype)


def relative_error(x: torch.Tensor, approx: torch.Tensor) -> torch.Tensor:
    """``‖x − approx‖ / ‖x‖`` per vector (last dim); 0 for zero vectors."""
    xf = x.float()
    num = (xf - approx.float()).norm(dim=-1)
    den = xf.norm(dim=-1)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """int values in [-8, 7] ``[..., D]`` (D even) -> uint8 ``[..., D/2]``, low nibble first."""
    if values.shape[-1] % 2:
        raise ValueError(f"INT4 packing needs an even last dimension, got {values.shape[-1]}")
    nibbles = (values.to(torch.int16) & 0xF).to(torch.uint8)
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., D/2]`` -> int8 ``[..., D]`` in [-8, 7]."""
    low = (packed & 0xF).to(torch.int16)
    high = (packed >> 4).to(torch.int16)
    both = torch.stack((low, high), dim=-1).flatten(-2)
    return torch.where(both > 7, both - 16, both).to(torch.int8)


def quantize_residual(r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual ``r[..., D]`` -> (packed uint8 ``[..., D/2]``, float32 ``scale[...]``)."""
    rf = r.float()
    scale = rf.abs().amax(dim=-1) / INT4_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(rf / safe.unsqueeze(-1)).clamp_(-INT4_MAX, INT4_MAX)
    return pack_int4(q), scale


def dequantize_residual(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return _widened(unpack_int4(packed)).mul_(scale.unsqueeze(-1))


def residual_add(values, locs, keys, slots, packed, scale16) -> torch.Tensor:
    """Add the INT4 residuals of the vectors at ``locs[T]`` to ``values[T, H, D]`` in place: vector
    ``(t, h)`` has one when ``locs[t] * H + h`` is among the sorted int32 ``keys``, stored in
    ``packed[slots[i]]`` with ``scale16[slots[i]]`` (``locs`` may repeat and come in any order)."""
    heads = values.shape[-2]
    flat_locs = locs.reshape(-1).to(torch.int32)
    wanted = (flat_locs.unsqueeze(1) * heads + torch.arange(heads, dtype=torch.int32, device=locs.device)).flatten()
    at = torch.searchsorted(keys, wanted).clamp_(max=keys.numel() - 1)
    hit = (keys[at] == wanted).nonzero(as_tuple=True)[0]
    if hit.numel():
        slot = slots[at[hit]]
        deq = dequantize_residual(packed[slot], scale16[slot].float())
        flat = values.view(-1, values.shape[-1])
        flat[hit] = (flat[hit].float() + deq).to(values.dtype)
    return values


def residual_release(keys, slots, free, counts, heads: int, locs: torch.Tensor) -> None:
    """Drop the residual keys of ``locs`` from the sorted ``keys[:used]`` (and ``slots`` beside
    them); their slots go on top of the ``free`` stack in key order. ``counts``: (used, nfree, ...)."""
    used, nfree = int(counts[0]), int(counts[1])
    gone = torch.isin(keys[:used] // heads, locs.to(keys.device, torch.int32))
    n = int(gone.sum())
    if n == 0:
        return
    free[nfree : nfree + n] = slots[:used][gone]
    keep = ~gone
    keys[: used - n], slots[: used - n] = keys[:used][keep].clone(), slots[:used][keep].clone()
    counts[0], counts[1] = used - n, nfree + n


def residual_store(keys, slots, free, counts, packed, scale16, heads: int, tau: float, locs, x, deq8) -> None:
    """Store new tokens in a residual side buffer (``ResidualSlots``): release what ``locs`` held,
    then each vector with ``relative_error(x, deq8) > tau`` (in row-major order) takes the slot on
    top of the ``free`` stack for its INT4 residual, its key ``loc * heads + h`` inserted in order
    (after equal keys); without a free slot it is counted dropped. ``counts``: (used, nfree,
    outliers, dropped), updated in place."""
    residual_release(keys, slots, free, counts, heads, locs)
    token, head = (relative_error(x, deq8) > tau).nonzero(as_tuple=True)
    n = int(token.numel())
    counts[2] += n
    if n == 0:
        return
    used, nfree = int(counts[0]), int(counts[1])
    take = min(n, nfree)
    counts[3] += n - take
    token, head = token[:take], head[:take]
    taken = free[nfree - take : nfree].flip(0)
    packed_r, scale_r = quantize_residual(x[token, head].float() - deq8[token, head].float())
    packed[taken.long()], scale16[taken.long()] = packed_r, scale_r.to(torch.float16)
    all_keys = torch.cat((keys[:used], (locs.to(torch.int32)[token] * heads + head).to(torch.int32)))
    order = all_keys.argsort(stable=True)
    keys[: used + take], slots[: used + take] = all_keys[order], torch.cat((slots[:used], taken))[order]
    counts[0], counts[1] = used + take, nfree - take

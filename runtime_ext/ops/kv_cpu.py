"""The C8 KV store and read on the CPU, one compiled call per layer side (``kv_cpu.c``).

The torch reference (``kv_ref``) reads a decode batch's rows in four full-size passes (gather the
int8 rows, widen to float32, scale, narrow to the model dtype), stores with about fifteen small ops
per side, and the INT4 residual of C8-S + residual adds a key search and about twenty more. Here:
- ``gather_dequantize_*``: one loop reads each int8 row once and writes it dequantized;
- ``residual_add``: a bitmap of the locations holding a residual, a binary search only for those;
- ``store_*``: the new tokens quantized into their rows (a token holding NaN/inf, or whose float16
  scale would overflow, stored as zeros and reported: ``kv_ref.unstorable_rows``);
- ``residual_release`` / ``residual_store``: the side buffer's bookkeeping in place.
Same arithmetic, same rounding (float32 products rounded once to nearest even): the tests
(``tests/unit/runtime_ext/test_kv_cpu.py``) check the outputs are *equal* to the reference's. The
one exception: ``residual_store`` sums the relative error in double, so a vector within float
rounding of τ may be decided the other way.

Bounds: every call checks its locations before it reads or writes at one (IndexError naming the
range, as the reference's indexing raises): the pool's rows ``[0, size)`` for the read and the
store, ``[0, 2^31 / H)`` (what the side buffer's int32 keys can name) for the residual calls;
negative ones too. The compiled calls check in C (one compare per location, in the loop they
already run), the reference path with one ``torch.aminmax``. The residual side buffer's own
state is checked where the C code indexes with it (sorted keys, slots below its capacity, counts
within its arrays); shapes that do not fit a kernel send the call to the reference.

The library is built, trusted and loaded by ``cpu_build`` (on first use; ``-O3 -march=native``
or portable, OpenMP; only from a cache directory and file owned by this user and writable by no
one else). Without one, on another dtype than bfloat16/float32, a non-contiguous tensor, or with
``kv_kernels: reference`` (``RuntimeExtConfig``), the call is the reference's. ``status()`` says
whether the library is loaded, ``reason()`` why, and ``CALLS`` counts what each call ran
(``report()``: the plugin report, ``structserve_kv_kernel_calls{impl}`` in ``/metrics``).
"""

from __future__ import annotations

import torch

from runtime_ext.ops import kv_ref
from runtime_ext.ops.cpu_build import library

PARALLEL_MIN = 1 << 18  # values per call below which one thread reads
_BF16 = {torch.bfloat16: 1, torch.float32: 0}
BAD_LOC, BAD_STATE = -100, -101  # kv_cpu.c: a location outside its range; side-buffer state outside its arrays
POOL, KEYS = "the pool's rows", "the locations residual keys can name"  # the ranges IndexError names
NATIVE, REFERENCE = 0, 1
CALLS = [0, 0]  # calls the compiled library ran, calls the torch reference ran (report())


def _library():
    return library().lib


def status() -> str:
    """``native`` when the compiled library is loaded, else ``reference`` (``reason()`` says why)."""
    return "native" if _library() is not None else "reference"


def reason() -> str:
    """Why ``status()`` is what it is (the build taken, or why none is loaded); "" before any call."""
    return library().reason if library.cache_info().currsize else ""


def report() -> dict:
    """For the plugin report: why, and how many calls each implementation ran in this process."""
    return {"kv_kernels_reason": reason(), "kv_kernel_calls": {"native": CALLS[NATIVE], "reference": CALLS[REFERENCE]}}


def _key_rows(heads: int) -> int:
    """Locations whose keys ``loc * heads + h`` fit the side buffer's int32 keys."""
    return 2**31 // heads


def _outside(locs: torch.Tensor, rows: int, what: str) -> IndexError:
    flat = locs.reshape(-1)
    bad = flat[(flat < 0) | (flat >= rows)]
    first = int(bad[0]) if bad.numel() else "?"
    return IndexError(f"KV cache location {first} is outside {what} [0, {rows}) ({bad.numel()} of {flat.numel()} are)")


def _reference(locs, rows: int, what: str) -> None:
    """Count a call the reference runs, after the check the compiled calls make (IndexError)."""
    CALLS[REFERENCE] += 1
    flat = torch.as_tensor(locs).reshape(-1)
    if flat.numel():
        low, high = torch.aminmax(flat)
        if int(low) < 0 or int(high) >= rows:
            raise _outside(flat, rows, what)


def _checked(code: int, locs, rows: int, what: str) -> int:
    """``code`` from a compiled call, counted; IndexError for a location or side-buffer index outside its range."""
    CALLS[NATIVE] += 1
    if code == BAD_LOC:
        raise _outside(torch.as_tensor(locs), rows, what)
    if code == BAD_STATE:
        raise IndexError("the residual side buffer's keys, slots or counts point outside its arrays")
    return code


def _fits(dtype: torch.dtype, *tensors: torch.Tensor) -> bool:
    return dtype in _BF16 and all(t.is_cpu and t.is_contiguous() for t in tensors)  # (is_cpu: 10x cheaper)


def _threads(values: int) -> int:
    """OpenMP threads for a call over ``values`` values: one below ``PARALLEL_MIN`` (waking the
    pool costs more than a small batch's read), else torch's intra-op count."""
    return max(1, torch.get_num_threads()) if values >= PARALLEL_MIN else 1


def _pool_fits(kernel: str, scale_dtype: torch.dtype, buffer, scales) -> bool:
    """``buffer[size, H, D]`` with ``scales`` of ``scale_dtype``: ``[size, H]`` per token, ``[H, D]`` static."""
    if buffer.dim() != 3 or buffer.dtype != torch.int8 or scales.dtype != scale_dtype:
        return False
    size, heads, dim = buffer.shape
    return scales.shape == ((size, heads) if kernel.endswith("token") else (heads, dim))


def _gather(kernel: str, scale_dtype: torch.dtype, buffer, scales, locs, dtype):
    """Rows ``locs`` of ``buffer[size, H, D]`` (int8) dequantized by ``kernel`` with ``scales`` of
    ``scale_dtype`` (None when the call does not fit it: the caller's reference runs)."""
    lib, flat = _library(), locs.reshape(-1).long()
    if lib is None or not _pool_fits(kernel, scale_dtype, buffer, scales) or not _fits(dtype, buffer, scales, flat):
        _reference(flat, buffer.shape[0], POOL)
        return None
    out = torch.empty((*locs.shape, *buffer.shape[1:]), dtype=dtype)
    heads, dim = buffer.shape[1:]
    code = getattr(lib, kernel)(
        out.data_ptr(), _BF16[dtype], buffer.data_ptr(), scales.data_ptr(), flat.data_ptr(), flat.numel(),
        buffer.shape[0], heads, dim, _threads(out.numel()),
    )  # fmt: skip
    _checked(code, flat, buffer.shape[0], POOL)
    return out


def gather_dequantize_per_token(buffer, scales, locs, dtype):
    """C8-D rows ``locs`` of ``buffer[size, H, D]`` (int8) with ``scales[size, H]`` (float16)."""
    out = _gather("gather_dequant_token", torch.float16, buffer, scales, locs, dtype)
    return kv_ref.gather_dequantize_per_token(buffer, scales, locs, dtype) if out is None else out


def gather_dequantize_static(buffer, scale, locs, dtype):
    """C8-S rows ``locs`` of ``buffer[size, H, D]`` (int8) with per-channel ``scale[H, D]`` (float32)."""
    out = _gather("gather_dequant_static", torch.float32, buffer, scale, locs, dtype)
    return kv_ref.gather_dequantize_static(buffer, scale, locs, dtype) if out is None else out


def _slots_fit(packed, scale16, dim: int) -> bool:
    """INT4 residual slots ``packed[capacity, dim / 2]`` (uint8), ``scale16[capacity]`` for vectors of ``dim``."""
    ok = packed.dtype == torch.uint8 and scale16.dtype == torch.float16 and packed.dim() == 2
    return ok and dim % 2 == 0 and dim <= 1024 and packed.shape[1] == dim // 2


def residual_add(values, locs, keys, slots, packed, scale16):
    """``kv_ref.residual_add`` (in place on ``values[T, H, D]``), one pass."""
    lib, flat = _library(), locs.reshape(-1).long()
    heads, dim = values.shape[-2:]
    rows, ok = _key_rows(heads), keys.dtype == slots.dtype == torch.int32 and keys.numel() == slots.numel()
    ok = ok and _slots_fit(packed, scale16, dim) and values.numel() == flat.numel() * heads * dim
    if lib is None or not ok or not _fits(values.dtype, values, flat, keys, slots, packed, scale16):
        _reference(flat, rows, KEYS)
        return kv_ref.residual_add(values, locs, keys, slots, packed, scale16)
    hits = lib.residual_add(
        values.data_ptr(), _BF16[values.dtype], flat.data_ptr(), flat.numel(), rows, heads, dim, keys.data_ptr(),
        slots.data_ptr(), keys.numel(), min(packed.shape[0], scale16.numel()), packed.data_ptr(), scale16.data_ptr(),
        _threads(values.numel()),
    )  # fmt: skip
    if _checked(hits, flat, rows, KEYS) < 0:  # no memory for its bitmap: nothing was added
        _reference(flat, rows, KEYS)
        return kv_ref.residual_add(values, locs, keys, slots, packed, scale16)
    return values


def _store(kernel: str, scale_dtype: torch.dtype, buf, scales, loc, x):
    """Quantize ``x[T, H, D]`` into rows ``loc`` by ``kernel``: False when the call does not fit it
    (the caller's reference runs), else the mask of tokens stored as zeros (None: all stored as
    given). The kernel refuses a NaN/inf before any write (-1) and stops at a float16 scale that
    would overflow (-2); then the tokens ``kv_ref.unstorable_rows`` names are zeroed and the call
    repeated. K and V arrive as views of the qkv output: made contiguous."""
    lib, flat, x = _library(), torch.as_tensor(loc).reshape(-1).long(), x.contiguous()
    fits = lib is not None and _pool_fits(kernel, scale_dtype, buf, scales)
    if not fits or x.shape != (flat.numel(), buf.shape[1], buf.shape[2]) or not _fits(x.dtype, x, buf, scales, flat):
        _reference(flat, buf.shape[0], POOL)
        return False
    heads, dim = buf.shape[1:]

    def call(values):
        args = (values.data_ptr(), _BF16[values.dtype], flat.numel(), buf.shape[0], heads, dim, flat.data_ptr())
        return getattr(lib, kernel)(*args, buf.data_ptr(), scales.data_ptr())

    if _checked(call(x), flat, buf.shape[0], POOL) >= 0:
        return None
    bad = kv_ref.unstorable_rows(x, scale_dtype == torch.float16)
    if call(kv_ref.zero_rows(x, bad).contiguous()) < 0:
        raise RuntimeError(f"{kernel} refused zeroed rows")  # unreachable: zeros always store
    return bad


def store_per_token(buf, scale_buf, loc, x):
    """``kv_ref.store_per_token``: quantize ``x[T, H, D]`` into rows ``loc`` (scales float16)."""
    bad = _store("quantize_store_token", torch.float16, buf, scale_buf, loc, x)
    return kv_ref.store_per_token(buf, scale_buf, loc, x) if bad is False else bad


def store_static(buf, scale, loc, x):
    """``kv_ref.store_static``: quantize ``x[T, H, D]`` with the per-channel ``scale[H, D]`` into rows ``loc``."""
    bad = _store("quantize_store_static", torch.float32, buf, scale, loc, x)
    return kv_ref.store_static(buf, scale, loc, x) if bad is False else bad


def _state_fits(keys, slots, free, counts) -> bool:
    ok = keys.dtype == slots.dtype == free.dtype == torch.int32 and counts.dtype == torch.int64 and counts.numel() >= 4
    return ok and _fits(torch.float32, keys, slots, free, counts)


def _entries(keys, slots, free) -> int:
    return min(keys.numel(), slots.numel(), free.numel())


def residual_release(keys, slots, free, counts, heads: int, locs) -> None:
    """``kv_ref.residual_release`` in one call (a search per location when none holds a key)."""
    lib, flat, rows = _library(), locs.reshape(-1).long(), _key_rows(heads)
    if lib is None or not _state_fits(keys, slots, free, counts) or not _fits(torch.float32, flat):
        _reference(flat, rows, KEYS)
        return kv_ref.residual_release(keys, slots, free, counts, heads, locs)
    args = (keys.data_ptr(), slots.data_ptr(), free.data_ptr(), counts.data_ptr(), heads, flat.data_ptr(), flat.numel())
    if _checked(lib.residual_release(*args, rows, _entries(keys, slots, free)), flat, rows, KEYS) < 0:
        _reference(flat, rows, KEYS)  # no memory for its bitmap: nothing changed
        kv_ref.residual_release(keys, slots, free, counts, heads, locs)


def residual_store(keys, slots, free, counts, packed, scale16, heads: int, tau: float, locs, x, deq8) -> None:
    """``kv_ref.residual_store`` in one call. The relative error is summed in double here, so a vector
    whose error is within float rounding of ``tau`` may be decided the other way than by the reference."""
    lib, flat, x, deq8 = _library(), locs.reshape(-1).long(), x.contiguous(), deq8.contiguous()
    rows, dim = _key_rows(heads), x.shape[-1]
    ok = lib is not None and _state_fits(keys, slots, free, counts) and _slots_fit(packed, scale16, dim)
    ok = ok and x.shape == deq8.shape == (flat.numel(), heads, dim) and deq8.dtype in _BF16
    if not ok or not _fits(x.dtype, x, deq8, flat, packed, scale16):
        _reference(flat, rows, KEYS)
        return kv_ref.residual_store(keys, slots, free, counts, packed, scale16, heads, tau, locs, x, deq8)
    found = lib.residual_store(
        x.data_ptr(), _BF16[x.dtype], deq8.data_ptr(), _BF16[deq8.dtype], x.shape[0], heads, x.shape[-1],
        flat.data_ptr(), rows, tau, keys.data_ptr(), slots.data_ptr(), free.data_ptr(), counts.data_ptr(),
        _entries(keys, slots, free), min(packed.shape[0], scale16.numel()), packed.data_ptr(), scale16.data_ptr(),
    )  # fmt: skip
    if _checked(found, flat, rows, KEYS) < 0:  # no memory for the release's bitmap: nothing changed
        _reference(flat, rows, KEYS)
        kv_ref.residual_store(keys, slots, free, counts, packed, scale16, heads, tau, locs, x, deq8)

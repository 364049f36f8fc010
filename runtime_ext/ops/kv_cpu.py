"""The C8 KV store and read on the CPU, one compiled call per layer side (``kv_cpu.c``).

The torch reference (``kv_ref``) reads a decode batch's rows in four full-size passes (gather the
int8 rows, widen to float32, scale, narrow to the model dtype), stores with about fifteen small ops
per side, and the INT4 residual of C8-S + residual adds a key search and about twenty more. Here:
- ``gather_dequantize_*``: one loop reads each int8 row once and writes it dequantized;
- ``residual_add``: a bitmap of the locations holding a residual, a binary search only for those;
- ``store_*``: the new tokens quantized into their rows (NaN/inf refused before any write);
- ``residual_release`` / ``residual_store``: the side buffer's bookkeeping in place.
Same arithmetic, same rounding (float32 products rounded once to nearest even): the tests
(``tests/unit/runtime_ext/test_kv_cpu.py``) check the outputs are *equal* to the reference's. The
one exception: ``residual_store`` sums the relative error in double, so a vector within float
rounding of τ may be decided the other way.

The library is compiled on first use with the host's C compiler (``$CC``, default ``cc``;
``-O3 -march=native``, OpenMP) into ``$STRUCTSERVE_KERNEL_CACHE`` (default
``~/.cache/structserve/kernels``), named by a hash of the source, the flags and the CPU's
feature flags, and loaded with ``ctypes``. Without a compiler, on another dtype than
bfloat16/float32, or with ``kv_kernels: reference`` (``RuntimeExtConfig``), every call is the
reference. ``status()`` says which, for the plugin report.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import subprocess
from functools import cache
from pathlib import Path

import torch

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.ops import kv_ref

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("kv_cpu.c")
X86_FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp")
PORTABLE_FLAGS = ("-O3", "-fopenmp")
PARALLEL_MIN = 1 << 18  # values per call below which one thread reads
_BF16 = {torch.bfloat16: 1, torch.float32: 0}
_P, _I64 = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "gather_dequant_token": (None, [_P, ctypes.c_int, _P, _P, _P, _I64, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
    "gather_dequant_static": (None, [_P, ctypes.c_int, _P, _P, _P, _I64, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
    "quantize_store_token": (ctypes.c_int, [_P, ctypes.c_int, _I64, ctypes.c_int, ctypes.c_int, _P, _P, _P]),
    "quantize_store_static": (ctypes.c_int, [_P, ctypes.c_int, _I64, ctypes.c_int, ctypes.c_int, _P, _P, _P]),
    "residual_release": (ctypes.c_int, [_P, _P, _P, _P, ctypes.c_int, _P, _I64]),
    "residual_store": (
        _I64,
        [_P, ctypes.c_int, _P, ctypes.c_int, _I64, ctypes.c_int, ctypes.c_int, _P, ctypes.c_float]
        + [_P, _P, _P, _P, _P, _P],
    ),
    "residual_add": (
        _I64,
        [_P, ctypes.c_int, _P, _I64, ctypes.c_int, ctypes.c_int, _P, _P, _I64, _P, _P, ctypes.c_int],
    ),
}


def _cache_dir() -> Path:
    root = os.environ.get("STRUCTSERVE_KERNEL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "structserve" / "kernels"


def _cpu_flags() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line for line in lines if line.startswith(("flags", "Features"))), platform.processor())


def _compile(flags: tuple[str, ...]) -> Path:
    """The library for ``flags``, compiled unless the cache has it (``CalledProcessError`` if not)."""
    compiler = os.environ.get("CC", "cc")
    key = hashlib.sha256("\0".join((SOURCE.read_text(), compiler, *flags, _cpu_flags())).encode()).hexdigest()[:16]
    target = _cache_dir() / f"kv_cpu-{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        cmd = [compiler, *flags, "-shared", "-fPIC", "-o", str(tmp), str(SOURCE)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        tmp.replace(target)
    return target


def load(flags: tuple[str, ...]) -> ctypes.CDLL | None:
    """The library built with ``flags``, its signatures set (None if it cannot be built or loaded)."""
    try:
        lib = ctypes.CDLL(str(_compile(flags)))
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("C8 KV kernels: %s failed (%s)", " ".join(flags), exc)
        return None
    for name, (restype, argtypes) in _SIGNATURES.items():
        getattr(lib, name).restype, getattr(lib, name).argtypes = restype, argtypes
    return lib


@cache
def _library() -> ctypes.CDLL | None:
    if RuntimeExtConfig.from_env().kv_kernels != "native":
        return None
    for flags in (X86_FLAGS, PORTABLE_FLAGS) if platform.machine() in ("x86_64", "AMD64") else (PORTABLE_FLAGS,):
        if (lib := load(flags)) is not None:
            return lib
    log.warning("C8 KV kernels: no compiled library, using the torch reference")
    return None


def status() -> str:
    """``native`` when the compiled read runs, else ``reference`` (configured, or no compiler)."""
    return "native" if _library() is not None else "reference"


def _fits(dtype: torch.dtype, *tensors: torch.Tensor) -> bool:
    return dtype in _BF16 and all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def _threads(values: int) -> int:
    """OpenMP threads for a call over ``values`` values: one below ``PARALLEL_MIN`` (waking the
    pool costs more than a small batch's read), else torch's intra-op count."""
    return max(1, torch.get_num_threads()) if values >= PARALLEL_MIN else 1


def _gather(kernel: str, scale_dtype: torch.dtype, buffer, scales, locs, dtype):
    """Rows ``locs`` of ``buffer[size, H, D]`` (int8) dequantized by ``kernel`` with ``scales`` of
    ``scale_dtype`` (None when the call does not fit it: the caller's reference runs)."""
    lib, flat = _library(), locs.reshape(-1).long()
    if lib is None or scales.dtype != scale_dtype or not _fits(dtype, buffer, scales, flat):
        return None
    out = torch.empty((*locs.shape, *buffer.shape[1:]), dtype=dtype)
    heads, dim = buffer.shape[1:]
    getattr(lib, kernel)(
        out.data_ptr(), _BF16[dtype], buffer.data_ptr(), scales.data_ptr(), flat.data_ptr(), flat.numel(),
        heads, dim, _threads(out.numel()),
    )  # fmt: skip
    return out


def gather_dequantize_per_token(buffer, scales, locs, dtype):
    """C8-D rows ``locs`` of ``buffer[size, H, D]`` (int8) with ``scales[size, H]`` (float16)."""
    out = _gather("gather_dequant_token", torch.float16, buffer, scales, locs, dtype)
    return kv_ref.gather_dequantize_per_token(buffer, scales, locs, dtype) if out is None else out


def gather_dequantize_static(buffer, scale, locs, dtype):
    """C8-S rows ``locs`` of ``buffer[size, H, D]`` (int8) with per-channel ``scale[H, D]`` (float32)."""
    out = _gather("gather_dequant_static", torch.float32, buffer, scale, locs, dtype)
    return kv_ref.gather_dequantize_static(buffer, scale, locs, dtype) if out is None else out


def residual_add(values, locs, keys, slots, packed, scale16):
    """``kv_ref.residual_add`` (in place on ``values[T, H, D]``), one pass."""
    lib, flat = _library(), locs.reshape(-1).long()
    ok = keys.dtype == slots.dtype == torch.int32 and scale16.dtype == torch.float16 and values.shape[-1] <= 1024
    if lib is None or not ok or not _fits(values.dtype, values, flat, keys, slots, packed, scale16):
        return kv_ref.residual_add(values, locs, keys, slots, packed, scale16)
    heads, dim = values.shape[-2:]
    hits = lib.residual_add(
        values.data_ptr(), _BF16[values.dtype], flat.data_ptr(), flat.numel(), heads, dim, keys.data_ptr(),
        slots.data_ptr(), keys.numel(), packed.data_ptr(), scale16.data_ptr(), _threads(values.numel()),
    )  # fmt: skip
    if hits < 0:  # no memory for its bitmap: nothing was added
        return kv_ref.residual_add(values, locs, keys, slots, packed, scale16)
    return values


def _store(kernel: str, scale_dtype: torch.dtype, buf, scales, loc, x) -> bool:
    """Quantize ``x[T, H, D]`` into rows ``loc`` by ``kernel`` (False when the call does not fit it:
    the caller's reference runs). K and V arrive as views of the qkv output: made contiguous."""
    lib, flat, x = _library(), torch.as_tensor(loc).reshape(-1).long(), x.contiguous()
    if lib is None or scales.dtype != scale_dtype or not _fits(x.dtype, x, buf, scales, flat):
        return False
    heads, dim = buf.shape[1:]
    args = (x.data_ptr(), _BF16[x.dtype], flat.numel(), heads, dim, flat.data_ptr(), buf.data_ptr(), scales.data_ptr())
    if getattr(lib, kernel)(*args) < 0:
        raise ValueError("the KV tensor holds NaN or inf; refusing to store it in the KV cache")
    return True


def store_per_token(buf, scale_buf, loc, x) -> None:
    """``kv_ref.store_per_token``: quantize ``x[T, H, D]`` into rows ``loc`` (scales float16)."""
    if not _store("quantize_store_token", torch.float16, buf, scale_buf, loc, x):
        kv_ref.store_per_token(buf, scale_buf, loc, x)


def store_static(buf, scale, loc, x) -> None:
    """``kv_ref.store_static``: quantize ``x[T, H, D]`` with the per-channel ``scale[H, D]`` into rows ``loc``."""
    if not _store("quantize_store_static", torch.float32, buf, scale, loc, x):
        kv_ref.store_static(buf, scale, loc, x)


def _state_fits(keys, slots, free, counts) -> bool:
    ok = keys.dtype == slots.dtype == free.dtype == torch.int32 and counts.dtype == torch.int64
    return ok and _fits(torch.float32, keys, slots, free, counts)


def residual_release(keys, slots, free, counts, heads: int, locs) -> None:
    """``kv_ref.residual_release`` in one call (a search per location when none holds a key)."""
    lib, flat = _library(), locs.reshape(-1).long()
    if lib is None or not _state_fits(keys, slots, free, counts) or not _fits(torch.float32, flat):
        return kv_ref.residual_release(keys, slots, free, counts, heads, locs)
    args = (keys.data_ptr(), slots.data_ptr(), free.data_ptr(), counts.data_ptr(), heads, flat.data_ptr(), flat.numel())
    if lib.residual_release(*args) < 0:
        kv_ref.residual_release(keys, slots, free, counts, heads, locs)


def residual_store(keys, slots, free, counts, packed, scale16, heads: int, tau: float, locs, x, deq8) -> None:
    """``kv_ref.residual_store`` in one call. The relative error is summed in double here, so a vector
    whose error is within float rounding of ``tau`` may be decided the other way than by the reference."""
    lib, flat, x, deq8 = _library(), locs.reshape(-1).long(), x.contiguous(), deq8.contiguous()
    ok = lib is not None and _state_fits(keys, slots, free, counts) and x.shape[-1] <= 1024
    if not ok or deq8.dtype not in _BF16 or not _fits(x.dtype, x, deq8, flat, packed, scale16):
        return kv_ref.residual_store(keys, slots, free, counts, packed, scale16, heads, tau, locs, x, deq8)
    found = lib.residual_store(
        x.data_ptr(), _BF16[x.dtype], deq8.data_ptr(), _BF16[deq8.dtype], x.shape[0], heads, x.shape[-1],
        flat.data_ptr(), tau, keys.data_ptr(), slots.data_ptr(), free.data_ptr(), counts.data_ptr(),
        packed.data_ptr(), scale16.data_ptr(),
    )  # fmt: skip
    if found < 0:  # no memory for the release's bitmap: nothing changed
        kv_ref.residual_store(keys, slots, free, counts, packed, scale16, heads, tau, locs, x, deq8)

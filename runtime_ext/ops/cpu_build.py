"""Build and load runtime_ext's compiled CPU libraries, or say why not: the C8 KV store and read
(``kv_cpu.c``, called by ``kv_cpu``) and decode's kernels: the few-row bf16 linear
(``linear_cpu``), attention over the pool (``attention_cpu``), RMSNorm and RoPE (``norm_cpu``), the seeded
sampler (``sample_cpu``). Each is
a ``Source``; everything below holds for all.

Build: the host's C compiler (``$CC``, default ``cc``), OpenMP, into ``$STRUCTSERVE_KERNEL_CACHE``
(default ``~/.cache/structserve/kernels``), one file per build named by a hash of the source (and the
headers beside it), the compiler, the flags and the machine; a ``-march=native`` build adds the CPU's feature flags
(``/proc/cpuinfo``) to that hash. On x86-64 this CPU's build comes first (``NATIVE_FLAGS``), the
portable one (``PORTABLE_FLAGS``) if it fails. When the feature flags cannot be read no
``-march=native`` build is made or loaded: a cached one from another CPU could hold instructions
this one lacks. ``STRUCTSERVE_KERNEL_SANITIZE=address`` adds ``-fsanitize=address`` (the hash
too): the tests run the kernels under AddressSanitizer that way.

A source whose kernels need an instruction set (``Source.needs``: linear, AVX512-BF16; attention,
AVX-512) has a probe call saying whether the build has it; a build without it is not loaded (the
reason says which), so a library that is loaded always runs its kernels. ``Kernel`` holds a decode
kernel module's library and its call counts.

Trust: a library is loaded only when the cache directory and the file are owned by this user and
writable by no one else (and the file is no symbolic link): anyone who can write there could
have this process run their code. Otherwise the torch reference runs and ``Loaded.reason`` says
why (the log, the plugin report and ``/metrics`` show it).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import re
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from runtime_ext.config import RuntimeExtConfig

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("kv_cpu.c")
NATIVE_FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp")
PORTABLE_FLAGS = ("-O3", "-fopenmp")
SANITIZE_ENV = "STRUCTSERVE_KERNEL_SANITIZE"
CACHE_ENV = "STRUCTSERVE_KERNEL_CACHE"
_P, _I, _I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
SIGNATURES = {  # kv_cpu.c's calls: (return type, argument types)
    "gather_dequant_token": (_I, [_P, _I, _P, _P, _P, _I64, _I64, _I, _I, _I]),
    "gather_dequant_static": (_I, [_P, _I, _P, _P, _P, _I64, _I64, _I, _I, _I]),
    "quantize_store_token": (_I, [_P, _I, _I64, _I64, _I, _I, _P, _P, _P]),
    "quantize_store_static": (_I, [_P, _I, _I64, _I64, _I, _I, _P, _P, _P]),
    "residual_release": (_I, [_P, _P, _P, _P, _I, _P, _I64, _I64, _I64]),
    "residual_store": (
        _I64,
        [_P, _I, _P, _I, _I64, _I, _I, _P, _I64, ctypes.c_float, _P, _P, _P, _P, _I64, _I64, _P, _P],
    ),
    "residual_add": (_I64, [_P, _I, _P, _I64, _I64, _I, _I, _P, _P, _I64, _I64, _P, _P, _I]),
}


LINEAR_SIGNATURES = {  # linear_cpu.c's calls
    "linear_available": (_I, []),
    "linear_bf16": (_I, [_P, _P, _I64, _P, _P, _I, _I64, _I64]),
    "linear_dot_bf16": (_I, [_P, _P, _I64, _P, _P, _I, _I64, _I64]),
    "linear_max_rows": (_I, [_I64]),
}
ATTENTION_SIGNATURES = {  # attention_cpu.c's calls
    "attention_available": (_I, []),
    "decode_attention_bf16": (_I, [_P, _P, _I64, _P, _P, _I64, _P, _P, _I, _I64, _I, _I, _I, _I, ctypes.c_float]),
}


@dataclass(frozen=True, eq=False)  # hashed by identity (the two below): library() caches per source
class Source:
    """One compiled library: its C file, its calls, and when the config turns it off (a reason)."""

    stem: str
    path: Path
    signatures: dict[str, tuple[object, list[object]]]
    what: str  # for the log
    off: Callable[[RuntimeExtConfig], str | None]
    needs: tuple[str, str] | None = None  # (the library's probe call, what a build lacks when it returns 0)


def _decode_off(config: RuntimeExtConfig) -> str | None:
    return None if config.decode_kernels == "native" else "configured: decode_kernels is reference"


KV = Source(
    "kv_cpu",
    SOURCE,
    SIGNATURES,
    "C8 KV kernels",
    lambda config: None if config.kv_kernels == "native" else "configured: kv_kernels is reference",
)
LINEAR = Source(
    "linear_cpu",
    SOURCE.with_name("linear_cpu.c"),
    LINEAR_SIGNATURES,
    "bf16 linear kernel",
    _decode_off,
    ("linear_available", "AVX512-BF16"),
)
NORM_SIGNATURES = {  # norm_cpu.c's calls
    "rmsnorm_bf16": (_I, [_P, _P, _P, _P, _P, _I64, _I64, ctypes.c_float, _I]),
    "rope_bf16": (_I, [_P, _P, _P, _I64, _P, _I64, _P, _I64, _P, _I, _I64, _I, _I, _I, _I, _I]),
}
NORM = Source("norm_cpu", SOURCE.with_name("norm_cpu.c"), NORM_SIGNATURES, "RMSNorm/RoPE kernel", _decode_off)
SAMPLE = Source(
    "sample_cpu",
    SOURCE.with_name("sample_cpu.c"),
    {"seeded_gumbel_argmax": (_I, [_P, _P, _I64, _P, _P, _I, _I64, _P, _P])},
    "seeded sampling kernel",
    _decode_off,
)
ATTENTION = Source(
    "attention_cpu",
    SOURCE.with_name("attention_cpu.c"),
    ATTENTION_SIGNATURES,
    "decode attention kernel",
    _decode_off,
    ("attention_available", "AVX-512"),
)


class Unavailable(Exception):
    """The library cannot be built, trusted or loaded; the message says why."""


@dataclass(frozen=True)
class Loaded:
    """What ``library()`` found: the library (None: the reference runs) and why."""

    lib: ctypes.CDLL | None
    reason: str


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "structserve" / "kernels"


def cpu_flags() -> str | None:
    """The CPU's feature-flag line of ``/proc/cpuinfo`` (None when it cannot be read)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line for line in lines if line.startswith(("flags", "Features"))), None)


def sanitizer_flags() -> tuple[str, ...]:
    """``-fsanitize=<$STRUCTSERVE_KERNEL_SANITIZE>`` and what makes its reports readable (none unset)."""
    wanted = os.environ.get(SANITIZE_ENV, "")
    if not wanted:
        return ()
    if not re.fullmatch(r"[a-z]+(,[a-z]+)*", wanted):
        raise Unavailable(f"{SANITIZE_ENV}={wanted!r} is not a list of sanitizer names (e.g. address)")
    return (f"-fsanitize={wanted}", "-fno-omit-frame-pointer", "-g")


def untrusted(path: Path) -> str | None:
    """Why ``path`` may not be loaded from (None: owned by this user, writable by no one else, no link)."""
    info = os.stat(path) if path.is_dir() else os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if info.st_uid != os.geteuid():
        return f"{path} is owned by uid {info.st_uid}, not by this process's uid {os.geteuid()}"
    if info.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {oct(info.st_mode & 0o777)})"
    return None


def build_key(compiler: str, flags: tuple[str, ...], source: Source = KV) -> str:
    """The hash that names a build: source, compiler, flags, machine; the CPU's feature flags for
    ``-march=native`` (``Unavailable`` when they cannot be read: no native build then)."""
    headers = sorted(source.path.parent.glob("*.h"))  # what a source may #include "..." (bf16.h)
    parts = [source.path.read_text(), *(h.read_text() for h in headers), compiler, *flags, platform.machine()]
    if "-march=native" in flags:
        features = cpu_flags()
        if features is None:
            raise Unavailable("this CPU's feature flags cannot be read (/proc/cpuinfo): no -march=native build")
        parts.append(features)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def compiled(flags: tuple[str, ...], source: Source = KV) -> Path:
    """The trusted library file for ``flags``, compiled unless the cache has it (``Unavailable`` if not)."""
    compiler = os.environ.get("CC", "cc")
    directory = cache_dir()
    target = directory / f"{source.stem}-{build_key(compiler, flags, source)}.so"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if why := untrusted(directory):
            raise Unavailable(f"cache not trusted: {why}")
        if not target.exists():
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            cmd = [compiler, *flags, "-shared", "-fPIC", "-o", str(tmp), str(source.path), "-lm"]
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            os.chmod(tmp, 0o755)  # whatever the umask: never writable by group or others
            tmp.replace(target)
        if why := untrusted(target):
            raise Unavailable(f"cache not trusted: {why}")
    except subprocess.CalledProcessError as exc:
        raise Unavailable(f"{compiler} failed: {exc.stderr.decode(errors='replace').strip()[:300]}") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"no build: {exc}") from exc
    return target


def load(flags: tuple[str, ...], source: Source = KV) -> ctypes.CDLL:
    """The library built with ``flags`` plus the sanitizer's (``Unavailable`` with the reason if not)."""
    path = compiled(flags + sanitizer_flags(), source)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise Unavailable(f"{path} does not load: {exc}") from exc
    for name, (restype, argtypes) in source.signatures.items():
        getattr(lib, name).restype, getattr(lib, name).argtypes = restype, argtypes
    if source.needs is not None and not getattr(lib, source.needs[0])():
        raise Unavailable(f"built without {source.needs[1]} (this CPU or compiler lacks it)")
    return lib


_BUILT = {"native": "compiled for this CPU", "portable": "compiled portable"}


def _builds() -> tuple[tuple[str, tuple[str, ...]], ...]:
    portable = ("portable", PORTABLE_FLAGS)
    return (("native", NATIVE_FLAGS), portable) if platform.machine() in ("x86_64", "AMD64") else (portable,)


@cache
def library(source: Source = KV) -> Loaded:
    """The process's library of ``source``: this CPU's build, else the portable one, else None and why."""
    if off := source.off(RuntimeExtConfig.from_env()):
        return Loaded(None, off)
    failures = []
    for name, flags in _builds():
        try:
            lib = load(flags, source)
        except Unavailable as exc:
            log.warning("%s: the %s build is unavailable: %s", source.what, name, exc)
            failures.append(str(exc))
            continue
        return Loaded(lib, _BUILT[name] + (f" (the native build: {failures[0]})" if failures else ""))
    log.warning("%s: no compiled library, the torch reference runs (%s)", source.what, failures[-1])
    return Loaded(None, failures[-1])


@dataclass(frozen=True, eq=False)
class Kernel:
    """A decode kernel module's library and its call counts: what ran (``native``, ``reference``)."""

    source: Source
    calls: list[int] = field(default_factory=lambda: [0, 0])  # compiled calls; calls it wanted and did not run

    def lib(self) -> ctypes.CDLL | None:
        return library(self.source).lib

    def runnable(self) -> ctypes.CDLL | None:
        """The library for a call the kernel takes, or None (counted: it runs torch's for want of one)."""
        lib = self.lib()
        if lib is None:
            self.calls[1] += 1
        return lib

    def status(self) -> str:
        """``native`` when the compiled library is loaded, else ``reference`` (``reason`` says why)."""
        return "native" if self.lib() is not None else "reference"

    def reason(self) -> str:
        return library(self.source).reason

    def report(self) -> dict:
        """The plugin report's ``decode_kernels`` entry: what runs, why, and the calls of each."""
        return {"impl": self.status(), "reason": self.reason(), "calls": dict(zip(("native", "reference"), self.calls))}

"""What the kv_cpu tests share: the builds a test runs on, and a check of what its calls ran.

A test that compares the compiled calls with the reference must prove the compiled path ran:
without a library every ``kv_cpu`` call *is* the reference, and the comparison would compare the
reference with itself. ``took`` reads ``kv_cpu.CALLS``; ``use_build`` fails (never skips) when
this machine cannot build the library (a C compiler is part of the development and CI setup).
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache

from runtime_ext.ops import cpu_build as kv_cpu_build
from runtime_ext.ops import kv_cpu

BUILDS = ["native", "portable"]


@cache
def _portable():
    return kv_cpu_build.load(kv_cpu_build.PORTABLE_FLAGS)


def use_build(name: str, monkeypatch) -> None:
    """Route ``kv_cpu``'s calls through ``name``: this CPU's build (``-march=native``, what the
    server loads here), the portable one (plain C loops), or ``reference`` (no library)."""
    if name == "native":
        assert kv_cpu.status() == "native", f"no compiled library: {kv_cpu.reason()}"
    elif name == "portable":
        lib = _portable()
        monkeypatch.setattr(kv_cpu, "_library", lambda: lib)
    else:
        monkeypatch.setattr(kv_cpu, "_library", lambda: None)


@contextmanager
def took(impl: str):
    """Every ``kv_cpu`` call in the block ran ``impl`` ("native": the compiled library, else
    "reference"), and at least one ran."""
    before = list(kv_cpu.CALLS)
    yield
    native, reference = (after - was for after, was in zip(kv_cpu.CALLS, before))
    want = (native, reference) if impl == "native" else (reference, native)
    assert want[0] > 0 and want[1] == 0, f"expected {impl} calls only: native ran {native}, reference {reference}"

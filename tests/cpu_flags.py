"""This CPU's feature flags (``/proc/cpuinfo``), for tests of kernels built for what the CPU has."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def flags() -> frozenset[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def has(*names: str) -> bool:
    return all(name in flags() for name in names)

"""How long the grammar worker may take: its CPU time, not the caller's wall clock.

A compile on a busy machine (the engine decoding on the same cores) takes longer in wall
time than on an idle one, and the client's schema is not at fault for that. So
``wait_reply`` gives a compile a CPU budget of ``timeout_s`` × the worker's usable
parallelism: about the wall time the compile would need on an idle machine.
- It returns False when the worker has spent that budget (the schema is too complex: a 400).
- It waits at most ``WALL_CAP_FACTOR`` × ``timeout_s`` of wall time. Past that, with the
  budget not spent, it raises ``grammars.errors.CompilerBusyError``: the machine is
  overloaded, and the service answers 503 with Retry-After.

Pure (no torch, sglang, fastapi or xgrammar); ``psutil`` reads the worker's CPU times.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

from grammars.errors import CompilerBusyError

COMPILE_THREADS = 8
"""Threads the worker's ``xgrammar.GrammarCompiler`` may use (xgrammar's default, passed
explicitly by ``grammars.compile.xgrammar_calls.load_compiler``)."""

WALL_CAP_FACTOR = 6.0
"""Wall time a compile may wait for its CPU budget, as a multiple of ``timeout_s``."""

_SLICE_S = 0.1


def usable_parallelism() -> int:
    """How many cores a compile can use at once: xgrammar's threads, bounded by this
    process's CPU affinity."""
    return max(1, min(COMPILE_THREADS, len(os.sched_getaffinity(0))))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (0.0 once it is gone: the
    caller then sees the dead pipe)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def wait_reply(conn: Any, pid: int, cpu_before: float, timeout_s: float) -> bool:
    """Wait for ``conn`` (a ``multiprocessing`` pipe end) to be readable.

    True when a reply (or EOF) is ready; False when worker ``pid`` has used its CPU budget
    since ``cpu_before`` (its ``cpu_seconds`` when the request was sent). Raises
    ``CompilerBusyError`` when the wall cap passes first."""
    budget = timeout_s * usable_parallelism()
    began = time.monotonic()
    cap = began + WALL_CAP_FACTOR * timeout_s
    while True:
        if conn.poll(min(_SLICE_S, max(0.0, cap - time.monotonic()))):
            return True
        used = cpu_seconds(pid) - cpu_before
        if used >= budget:
            return False
        if time.monotonic() >= cap:
            raise CompilerBusyError(
                f"the grammar compiler got {used:.1f} CPU-s in {time.monotonic() - began:.0f} s "
                f"(budget {budget:g} CPU-s): the server is overloaded; retry the request"
            )

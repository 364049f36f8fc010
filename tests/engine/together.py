"""Independent engine runs of one test, two at a time.

An engine start here is mostly Python imports in three processes (server, scheduler,
detokenizer), not model work: two runs side by side on this 2-core machine take about 61 s where
one after the other take 93 s (tiny Qwen3, measured). Each run is a separate process with its own
ports (SGLang picks them at random below the ephemeral range) and its own output.

Side by side, each run gets one OpenMP thread (``OMP_NUM_THREADS=1`` in the environment the runs
inherit): two runs with the default two threads each on two cores spin in each other's
barriers (two compute-bound processes that way took over four times as long as in turn, seen).
``ENGINE_RUNS_TOGETHER=1`` runs them one after the other (to read one run's log alone).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
WIDTH = int(os.environ.get("ENGINE_RUNS_TOGETHER", "2"))


def together(*calls: Callable[[], T]) -> list[T]:
    """Each call's result in order; the first failure raises after every call has ended. The
    calls read ``os.environ`` when they build their processes' environment."""
    width = max(1, min(WIDTH, len(calls)))
    saved = os.environ.get("OMP_NUM_THREADS")
    if width > 1:
        os.environ["OMP_NUM_THREADS"] = "1"
    try:
        with ThreadPoolExecutor(max_workers=width) as pool:
            futures = [pool.submit(call) for call in calls]
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    return [future.result() for future in futures]

"""Independent engine runs of one test, two at a time.

An engine start here is mostly Python imports in three processes (server, scheduler,
detokenizer), not model work: two runs side by side on this 2-core machine take about 61 s where
one after the other take 93 s (tiny Qwen3, measured). Each run is a separate process with its own
ports (SGLang picks them at random below the ephemeral range) and its own output.

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
    """Each call's result in order; the first failure raises after every call has ended."""
    with ThreadPoolExecutor(max_workers=max(1, WIDTH)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]

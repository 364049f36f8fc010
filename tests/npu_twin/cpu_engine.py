"""The CPU engine on the same model and text as a twin test: ``tests/engine/sglang_greedy.py`` (the real
SGLang engine, ``engine.device: cpu``, what ``make serve`` runs here) in a process of its own, since the
twin's process has imported SGLang as an NPU build. What the twin's answers are held to.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.npu_twin.twin import ENV

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@dataclass(frozen=True)
class CpuRun:
    answers: list[list[int]]  # greedy tokens per prompt
    prompt_logprobs: list[list[float]]  # teacher-forced logprob of each prompt token after the first

    def perplexity(self, prompt: int) -> float:
        """Held-out perplexity of prompt ``prompt`` (its tokens after the first)."""
        logprobs = self.prompt_logprobs[prompt]
        return math.exp(-sum(logprobs) / len(logprobs))


def cpu_engine(
    model_dir: Path, prompts: list[list[int]], tokens: int, kv_cache: str = "bf16", scheme: str = "none"
) -> CpuRun:
    """``prompts`` through the CPU engine in bf16 (``scheme``: ``none`` or ``modelslim`` for an export):
    ``tokens`` greedy tokens each and the prompt logprobs (``INPUT_LOGPROBS``: computed in the prefill,
    where attention reads every token back from the KV pool). ``STRUCTSERVE_KV_CALIBRATION`` is this
    process's (the C8-S scales the twin run uses)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "ASCEND_")) and k != ENV}
    env["OMP_NUM_THREADS"] = "1"  # it runs beside the twin's own work (in_background): one core each
    cmd = [sys.executable, str(ROOT / "tests/engine/sglang_greedy.py"), str(model_dir), str(tokens)]
    cmd += [json.dumps(prompts), kv_cache, scheme, "bfloat16"]
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**env, "INPUT_LOGPROBS": "1"}, capture_output=True, text=True, timeout=600
    )
    found = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(("OUTPUT_IDS ", "INPUT_LOGPROBS "))
    }
    assert proc.returncode == 0 and len(found) == 2, f"CPU engine ({kv_cache}, {scheme}): {proc.stderr[-3000:]}"
    return CpuRun(found["OUTPUT_IDS"], found["INPUT_LOGPROBS"])


def in_background(call: Callable[[], T]) -> Future[T]:
    """``call`` in a thread of its own: its engine processes run while the twin does its own work
    (their start is mostly imports); the test that needs the result waits on the future."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call)
    finally:
        pool.shutdown(wait=False)

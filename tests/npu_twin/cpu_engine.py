"""The CPU engine on the same model and text as a twin test: ``tests/engine/sglang_greedy.py`` (the real
SGLang engine, ``engine.device: cpu``, what ``make serve`` runs here) in a process of its own, since the
twin's process has imported SGLang as an NPU build. What the twin's answers are held to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.npu_twin.twin import ENV

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CpuRun:
    answers: list[list[int]]  # greedy tokens per prompt
    prompt_logprobs: list[list[float]]  # teacher-forced logprob of each prompt token after the first


def cpu_engine(
    model_dir: Path, prompts: list[list[int]], tokens: int, kv_cache: str = "bf16", scheme: str = "none"
) -> CpuRun:
    """``prompts`` through the CPU engine in bf16 (``scheme``: ``none`` or ``modelslim`` for an export):
    ``tokens`` greedy tokens each and the prompt logprobs (``INPUT_LOGPROBS``: computed in the prefill,
    where attention reads every token back from the KV pool). ``STRUCTSERVE_KV_CALIBRATION`` is this
    process's (the C8-S scales the twin run uses)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "ASCEND_")) and k != ENV}
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

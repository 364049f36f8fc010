"""Runs each twin module (``tests/npu_twin/twin_*.py``) in a fresh interpreter with the torch_npu twin
installed (``TORCH_NPU_TWIN=1``: ``conftest.py``), one pytest process per module.

Why a process of their own: SGLang decides ``is_npu()`` when its modules are imported, and the
twin makes torch look like an NPU build for the whole process. The CPU suites in this process
(``make test`` runs one pytest) have already imported SGLang as a CPU build and must stay one.

A module's tests pass or fail together here; the child's own report (each test, its duration) is
in the failure message, and on success in this test's captured output (``-rP`` shows it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.npu_twin.twin import ENV

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULES = sorted(HERE.glob("twin_*.py"))


def test_twin_modules_exist() -> None:
    assert {"twin_c8_attention", "twin_kv_pool", "twin_model", "twin_modelslim"} <= {m.stem for m in MODULES}


@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.stem)
def test_under_twin(module: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", str(module.relative_to(ROOT)), "-q", "-p", "no:cacheprovider"]
    cmd += ["-o", "python_files=twin_*.py", "-rA"]
    # SGLang's defaults: no SGLANG_* / ASCEND_* switch of this process (e.g. SGLANG_USE_CPU_ENGINE) reaches the child
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "ASCEND_"))}
    proc = subprocess.run(cmd, cwd=ROOT, env={**env, ENV: "1"}, capture_output=True, text=True, timeout=900)
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, (
        f"{module.name} under the twin: exit {proc.returncode}\n{proc.stdout[-12000:]}\n{proc.stderr[-4000:]}"
    )

"""The compiled kernels' tests (C8 KV; decode's linear, attention, RMSNorm/RoPE, seeded sampling) run clean under
AddressSanitizer, and that run can fail.

A child process builds the library with ``-fsanitize=address`` (``STRUCTSERVE_KERNEL_SANITIZE``,
into a fresh cache) and runs the equality and bounds tests with ASan's runtime preloaded (Python
and torch are not instrumented: ``LD_PRELOAD``; ``detect_leaks=0`` since the interpreter keeps
memory to its exit). libstdc++ is preloaded with it: Python does not link it, so ASan would not
find the real ``__cxa_throw`` and aborts ("CHECK failed ... real___cxa_throw") at the first C++
exception, which importing SGLang's triton throws. ASan intercepts malloc, so torch's tensors get
redzones and a kernel reading or writing one byte past a pool, a scale table or a side buffer
aborts the child; its report goes to ``asan.<pid>`` files (pytest's capture would swallow it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from runtime_ext.ops import cpu_build as kv_cpu_build

ROOT = Path(__file__).resolve().parents[3]
KERNEL_TESTS = [
    "tests/unit/runtime_ext/test_kv_cpu.py",
    "tests/unit/runtime_ext/test_kv_cpu_bounds.py",
    "tests/unit/runtime_ext/test_linear_cpu.py",
    "tests/unit/runtime_ext/test_attention_cpu.py",
    "tests/unit/runtime_ext/test_norm_cpu.py",
    "tests/unit/runtime_ext/test_sample_cpu.py",
]
DECODE_STEMS = ("linear_cpu", "attention_cpu", "norm_cpu", "sample_cpu")  # this CPU's build of each (the tests need it)


def _runtime(name: str) -> str:
    compiler = os.environ.get("CC", "cc")
    found = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True, check=True)
    path = found.stdout.strip()
    assert os.path.isabs(path) and os.path.exists(path), f"{compiler} has no {name} ({path!r})"
    return path


def _asan_env(tmp: Path) -> dict[str, str]:
    """The child's environment: ASan (and libstdc++) preloaded, reports in ``tmp/asan.<pid>``,
    the library built instrumented into ``tmp/cache``."""
    return {
        **os.environ,
        "LD_PRELOAD": f"{_runtime('libasan.so')} {_runtime('libstdc++.so')}",
        "ASAN_OPTIONS": f"detect_leaks=0:exitcode=86:log_path={tmp / 'asan'}",
        kv_cpu_build.SANITIZE_ENV: "address",
        kv_cpu_build.CACHE_ENV: str(tmp / "cache"),
    }


def _reports(tmp: Path) -> str:
    return "".join(report.read_text(errors="replace") for report in tmp.glob("asan.*"))


def test_the_kernel_tests_pass_under_address_sanitizer(tmp_path):
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", *KERNEL_TESTS]
    run = subprocess.run(cmd, cwd=ROOT, env=_asan_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and not _reports(tmp_path), _reports(tmp_path)[:6000] + run.stdout[-3000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
    builds = list((tmp_path / "cache").glob("kv_cpu-*.so"))
    assert len(builds) == 2, builds  # this CPU's and the portable one, both instrumented:
    assert all(b"__asan_report_load" in build.read_bytes() for build in builds)
    for stem in DECODE_STEMS:  # every build instrumented; the portable linear one has no loop (so no checked load)
        decode = [build.read_bytes() for build in (tmp_path / "cache").glob(f"{stem}-*.so")]
        assert decode and all(b"__asan_init" in build for build in decode), stem
        assert any(b"__asan_report_load" in build for build in decode), stem


CANARY = textwrap.dedent(
    """
    import torch
    from runtime_ext.ops import cpu_build as kv_cpu_build

    lib = kv_cpu_build.load(kv_cpu_build.PORTABLE_FLAGS)
    size, heads, dim = 16, 2, 32
    pool, scales = torch.zeros(size, heads, dim, dtype=torch.int8), torch.ones(size, heads, dtype=torch.float16)
    locs, out = torch.tensor([size]), torch.empty(1, heads, dim, dtype=torch.bfloat16)
    # rows = size + 1: the bounds check is told the pool is one row longer than it is
    lib.gather_dequant_token(out.data_ptr(), 1, pool.data_ptr(), scales.data_ptr(), locs.data_ptr(), 1, size + 1,
                             heads, dim, 1)
    print("read past the pool unnoticed")
    """
)


def test_address_sanitizer_catches_a_read_past_the_pool(tmp_path):
    """What makes the run above a proof: the same harness, one compiled read one row past the
    pool (its bounds check handed a wrong size), and the child dies with ASan's report."""
    run = subprocess.run(
        [sys.executable, "-c", CANARY], cwd=ROOT, env=_asan_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    report = _reports(tmp_path)
    assert run.returncode == 86, run.stdout + run.stderr[-4000:]
    assert "heap-buffer-overflow" in report and "gather_dequant_token" in report, report[:4000]
    assert "unnoticed" not in run.stdout

"""Formats, parsers, the tool-call grammar builder, KV sizing and the quantization policy,
sensitivity and checkpoint-layout logic stay pure (no heavy runtime imports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PURE = [
    "runtime_ext.formats",
    "runtime_ext.parsers",
    "runtime_ext.parsers.tool_calls",
    "runtime_ext.parsers.sglang_adapter",
    "grammars.tool_calls",
    "runtime_ext.kv_cache.sizing",
    "runtime_ext.kv_cache.sglang_hooks",
    "runtime_ext.config",
    "runtime_ext.state",
    "runtime_ext.quant.policy",
    "runtime_ext.quant.sensitivity",
    "runtime_ext.quant.modelslim",
    "runtime_ext.prefix_cache.matcher",
]


def heavy_modules_after_import(modules: list[str], preamble: str = "") -> str:
    """Import ``modules`` in a fresh interpreter; return the heavy packages then loaded."""
    code = (
        "import sys, runtime_ext\n"
        f"assert runtime_ext.__file__.startswith({str(ROOT)!r}), runtime_ext.__file__\n"
        f"{preamble}\n"
        f"for name in {modules!r}: __import__(name)\n"
        "heavy = {m.split('.')[0] for m in sys.modules} & {'torch', 'sglang', 'xgrammar', 'fastapi'}\n"
        "print(','.join(sorted(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.strip()


def test_pure_modules_import_neither_torch_sglang_xgrammar_nor_fastapi() -> None:
    assert heavy_modules_after_import(PURE) == ""


def test_the_probe_sees_a_heavy_module() -> None:
    assert heavy_modules_after_import(PURE, "import types; sys.modules['torch'] = types.ModuleType('torch')") == "torch"

"""Our SGLang plugin runs inside SGLang's scheduler process (an observable effect)."""

from __future__ import annotations

import re

import httpx
import psutil

PLUGIN_RE = re.compile(
    r'^structserve_runtime_ext_loaded\{dp_rank="0",scheduler_pid="(\d+)",version="([^"]+)"\} 1\.0$', re.M
)


def test_plugin_reports_from_the_scheduler_process(qwen_server):
    text = httpx.get(f"{qwen_server.base_url}/metrics", timeout=30).text
    match = PLUGIN_RE.search(text)
    assert match, text
    pid = int(match.group(1))
    server = psutil.Process(qwen_server.proc.pid)
    children = {c.pid for c in server.children(recursive=True)}
    assert pid != server.pid and pid in children
    # the process SGLang names its scheduler
    assert (
        "scheduler" in " ".join(psutil.Process(pid).cmdline()).lower()
        or "scheduler" in psutil.Process(pid).name().lower()
    )
    assert 'structserve_kv_cache_method{method="unquantized"} 1.0' in text  # kv_cache: bf16 builds SGLang's own pool

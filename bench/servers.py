"""The servers the serving benches start: SGLang's own (``launch_server``, with or without
runtime_ext) and structserve, on the same engine settings (``ENGINE``); start, stop, freeze, ask
each scheduler whether it runs runtime_ext and which attention backend it ran."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ENGINE = {"max_total_tokens": 32768, "page_size": 16, "max_running_requests": 64, "dtype": "bfloat16"}


def sglang_cmd(
    model: Path, port: int, engine: dict | None = None, extra: tuple[str, ...] = ("--incremental-streaming-output",)
) -> list[str]:
    """SGLang's own server on the same engine settings as structserve (``engine``: ENGINE)."""
    engine = engine or ENGINE
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--attention-backend",
        "torch_native",
        "--max-total-tokens",
        str(engine["max_total_tokens"]),
        "--page-size",
        str(engine["page_size"]),
        "--max-running-requests",
        str(engine["max_running_requests"]),
        "--dtype",
        engine["dtype"],
        "--random-seed",
        "0",
        "--log-level",
        "warning",
        *extra,
        "--served-model-name",
        model.name,
    ]


def ours_cmd(model: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "service", "serve", "--model", str(model), "--port", str(port)]


def ours_env() -> dict[str, str]:
    return {
        "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(ENGINE["max_total_tokens"]),
        "STRUCTSERVE_ENGINE__PAGE_SIZE": str(ENGINE["page_size"]),
        "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": str(ENGINE["max_running_requests"]),
        "STRUCTSERVE_DTYPE": ENGINE["dtype"],
        "STRUCTSERVE_LOG_LEVEL": "warning",
    }


def start(cmd: list[str], env: dict[str, str], ready_url: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        cmd, env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", **env}, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[2]} exited early; see {log}")
        try:
            if httpx.get(ready_url, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise SystemExit(f"{cmd[2]} not ready in 600 s; see {log}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


SERVERS = {  # name -> (command builder, extra env, readiness path)
    # upstream as shipped: SGLANG_PLUGINS names no installed plugin, so runtime_ext is not loaded
    "SGLang": ("sglang", {"SGLANG_PLUGINS": "none"}, "/health_generate"),
    # SGLang's own server with runtime_ext loaded through its entry point (our attention backend)
    "SGLang+plugin": ("sglang", {}, "/health_generate"),
    "structserve": ("ours", {}, "/ready"),
    "structserve C8-D": ("ours", {"STRUCTSERVE_KV_CACHE": "c8_dynamic"}, "/ready"),
    "structserve W8A8": ("ours", {"STRUCTSERVE_QUANTIZATION": "w8a8_dynamic"}, "/ready"),
    "structserve strict": ("ours", {"STRUCTSERVE_GRAMMAR__JSON_SCHEMA_SEMANTICS": "strict"}, "/ready"),
}
ANCHOR = "SGLang"


def launch(name: str, model: Path, port: int) -> subprocess.Popen:
    kind, env, ready = SERVERS[name]
    cmd = sglang_cmd(model, port) if kind == "sglang" else ours_cmd(model, port)
    env = env if kind == "sglang" else {**ours_env(), **env}
    log = Path(f"/tmp/bench-{name.replace(' ', '_').replace('+', '_')}.log")
    return start(cmd, env, f"http://127.0.0.1:{port}{ready}", log)


def plugin_state(name: str, port: int) -> str:
    """What the scheduler itself reports about runtime_ext (SGLang's ``/server_info``
    internal state; structserve's ``/metrics``): proves which column ran our code."""
    base = f"http://127.0.0.1:{port}"
    if SERVERS[name][0] == "ours":
        lines = httpx.get(f"{base}/metrics", timeout=30).text.splitlines()
        calls = [ln for ln in lines if ln.startswith("structserve_attention_decode_calls")]
        return "; ".join(ln.split("{", 1)[1] for ln in calls) or "no decode counters"
    states = httpx.get(f"{base}/server_info", timeout=30).json().get("internal_states") or [{}]
    report = states[0].get("structserve_runtime_ext")
    if report is None:
        return "runtime_ext not loaded"
    return f"runtime_ext loaded, decode calls {report['attention']}"


def attention_backend(name: str, port: int) -> str:
    """The attention backend a server ran, as the server reports it: structserve's
    ``structserve_kv_serving`` gauge (the scheduler's live backend class); SGLang's ``/server_info``
    ``attention_backend`` setting, plus the live class runtime_ext reports when it is loaded."""
    base = f"http://127.0.0.1:{port}"
    if SERVERS[name][0] == "ours":
        text = httpx.get(f"{base}/metrics", timeout=30).text
        found = re.search(r'^structserve_kv_serving\{[^}]*attention_backend="([^"]+)"', text, re.MULTILINE)
        return found.group(1) if found else "not reported (no structserve_kv_serving in /metrics)"
    info = httpx.get(f"{base}/server_info", timeout=30).json()
    setting = info.get("attention_backend") or "not reported"
    report = (info.get("internal_states") or [{}])[0].get("structserve_runtime_ext") or {}
    live = report.get("attention_backend")
    return f"{setting} (live: {live})" if live else setting


def signal_tree(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """Send ``sig`` to a server and all its children (scheduler, detokenizer)."""
    import psutil

    root = psutil.Process(proc.pid)
    for p in [root, *root.children(recursive=True)]:
        p.send_signal(sig)

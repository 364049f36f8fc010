"""SmolLM2 forced tool calls: how often does a turn run into max_tokens instead of stopping?

Starts ``structserve serve`` on SmolLM2-135M-Instruct (or uses ``--base-url``), sends one
``tool_choice: "required"`` request per tool of ``tests/data/tools.json`` (the first 30) (the user turn
states the details from ``tests/data/tools_examples.json``), greedy, ``max_tokens`` 256,
parallel calls on (the default), and prints a table: calls per response, finish_reason,
whether the arguments validate, and the share truncated at ``max_tokens``.

Usage:  .venv/bin/python bench/tool_calls_smol.py [--base-url URL] [--max-tokens 256]
Run the server from another tree (e.g. the previous commit) by putting it first on
PYTHONPATH: the server subprocess inherits the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from jsonschema import Draft202012Validator

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def tasks() -> list[tuple[dict, str]]:
    """(tool, user turn) per tool of the corpus."""
    tools = json.loads((DATA / "tools.json").read_text())
    examples = json.loads((DATA / "tools_examples.json").read_text())
    out = []
    for tool in tools:
        fn = tool["function"]
        details = "; ".join(f"{k}: {json.dumps(v)}" for k, v in examples.get(fn["name"], {}).items())
        out.append((tool, f"{fn['description']} Details: {details}"))
    return out


def start_server(model_dir: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": "8192",
        "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": "16",
    }
    log = open(f"/tmp/tool_calls_smol-{port}.log", "wb")
    cmd = [sys.executable, "-m", "service", "serve", "--model", str(model_dir), "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}); see {log.name}")
        try:
            if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"server not ready; see {log.name}")


def run_one(base: str, model: str, tool: dict, content: str, max_tokens: int) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "tools": [tool],
        "tool_choice": "required",
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    resp = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=3600).json()
    choice = resp["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    schema = tool["function"].get("parameters") or {"type": "object"}
    valid = 0
    for call in calls:
        try:
            Draft202012Validator(schema).validate(json.loads(call["function"]["arguments"]))
            valid += 1
        except Exception:  # noqa: BLE001 - counted, not raised
            pass
    return {
        "tool": tool["function"]["name"],
        "calls": len(calls),
        "valid": valid,
        "finish": choice["finish_reason"],
        "tokens": resp["usage"]["completion_tokens"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", help="a running structserve on SmolLM2 (default: start one)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--limit", type=int, default=30, help="the first N tools of the corpus (default 30)")
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    proc = None
    if args.base_url:
        base = args.base_url.rstrip("/")
    else:
        from assets import fetch

        proc, base = start_server(fetch().smollm2)
    try:
        model = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
        print(f"{'tool':28} {'calls':>5} {'valid':>5} {'tokens':>6}  finish", flush=True)

        def one(task: tuple[dict, str]) -> dict:
            r = run_one(base, model, *task, args.max_tokens)
            print(f"{r['tool']:28} {r['calls']:>5} {r['valid']:>5} {r['tokens']:>6}  {r['finish']}", flush=True)
            return r

        with ThreadPoolExecutor(args.concurrency) as pool:
            rows = list(pool.map(one, tasks()[: args.limit]))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    truncated = sum(r["finish"] == "length" for r in rows)
    multi = sum(r["calls"] > 1 for r in rows)
    print(
        f"\n{len(rows)} tasks, max_tokens {args.max_tokens}: truncated at max_tokens {truncated} "
        f"({100 * truncated / len(rows):.0f}%), more than one call {multi}, "
        f"finish_reason tool_calls {sum(r['finish'] == 'tool_calls' for r in rows)}"
    )


if __name__ == "__main__":
    main()

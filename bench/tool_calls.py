"""Function calling on a real model: structserve vs SGLang's own server, same model dir.

Twelve tasks written over the tool corpus (``tests/data/tools.json``; each task sends 2-4 of
its tools, expected calls in ``bench/tool_calls_tasks.json``, 4 of them parallel) run with
``tool_choice`` "required" and "auto", greedy, through the official ``openai`` client, against

- ``structserve serve`` (tool format qwen) and
- ``python -m sglang.launch_server --device cpu --tool-call-parser qwen25``,

one server at a time, same dtype / KV pool / page size. Per server and mode it reports: calls
present, schema-valid arguments (jsonschema), exact-match accuracy (names + arguments, order-free),
calls beyond the expected ones, runaways (extra calls and ``finish_reason: length``),
``finish_reason`` counts and latency; prints a table and writes every response to JSON. Then what
the servers were given and how alike they answered: each server's summed prompt tokens per mode
(different sums mean the servers rendered the tools into different prompts, and say so) and the
share of (task, tool_choice) pairs with the same calls on both.

    .venv/bin/structserve assets fetch qwen2.5-coder       # once, ~3 min
    .venv/bin/python bench/tool_calls.py                   # both servers, both modes
    .venv/bin/python bench/tool_calls.py --servers structserve --modes required --tasks 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import jsonschema
from openai import OpenAI
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import sglang_cmd, start, stop  # noqa: E402
from bench.tool_calls_compare import compare  # noqa: E402
from tests.server import free_port  # noqa: E402

ENGINE = {"max_total_tokens": 8192, "page_size": 16, "max_running_requests": 4, "dtype": "bfloat16"}
SGLANG_FLAGS = ("--sleep-on-idle", "--tool-call-parser", "qwen25")
TASKS_FILE = Path(__file__).with_name("tool_calls_tasks.json")


def load_tools() -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t for t in json.loads((ROOT / "tests/data/tools.json").read_text())}


def load_tasks(tools: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks, each checked against the corpus: its tools exist, and every expected call
    names one of them with arguments valid for that tool's schema."""
    tasks = json.loads(TASKS_FILE.read_text())
    for task in tasks:
        for call in task["expected"]:
            assert call["name"] in task["tools"], (task["id"], call["name"])
            jsonschema.validate(call["arguments"], tools[call["name"]]["function"]["parameters"])
    return tasks


# ---- scoring (pure) ---------------------------------------------------------------------------


def parse_args(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def score(task: dict[str, Any], rec: dict[str, Any], tools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What one response did against the task's expected calls."""
    calls = rec.get("tool_calls") or []
    valid = 0
    for call in calls:
        args = parse_args(call["arguments"])
        tool = tools.get(call["name"])
        if tool is not None and call["name"] in task["tools"] and isinstance(args, dict):
            valid += jsonschema.Draft202012Validator(tool["function"]["parameters"]).is_valid(args)
    key = lambda c: json.dumps([c["name"], c["arguments"]], sort_keys=True)  # noqa: E731
    got = sorted(key({"name": c["name"], "arguments": parse_args(c["arguments"])}) for c in calls)
    want = sorted(key(c) for c in task["expected"])
    extra = max(0, len(calls) - len(task["expected"]))
    return {
        "calls": len(calls),
        "valid": valid,
        "exact": got == want,
        "extra": extra,
        "subset": subset_match(task["expected"], [(c["name"], parse_args(c["arguments"])) for c in calls]),
        "names": sorted(c["name"] for c in calls) == sorted(c["name"] for c in task["expected"]),
        "runaway": extra > 0 and rec.get("finish_reason") == "length",
    }


def subset_match(expected: list[dict[str, Any]], got: list[tuple[str, Any]]) -> bool:
    """As many calls as expected, each expected call matched by a distinct call with its name
    and at least its arguments (extra optional arguments allowed, e.g. ``"pin": null``)."""
    if len(got) != len(expected):
        return False
    left = list(got)
    for want in expected:
        hit = next(
            (
                g
                for g in left
                if g[0] == want["name"]
                and isinstance(g[1], dict)
                and all(g[1].get(k, object()) == v for k, v in want["arguments"].items())
            ),
            None,
        )
        if hit is None:
            return False
        left.remove(hit)
    return True


def summarize(recs: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(recs)
    scores = [r["score"] for r in recs]
    calls = sum(s["calls"] for s in scores)
    lat = [r["latency_s"] for r in recs]
    return {
        "tasks": n,
        "with_calls": sum(s["calls"] > 0 for s in scores),
        "calls": calls,
        "valid_calls": sum(s["valid"] for s in scores),
        "exact": sum(s["exact"] for s in scores),
        "subset": sum(s["subset"] for s in scores),
        "names_match": sum(s["names"] for s in scores),
        "extra_calls": sum(s["extra"] for s in scores),
        "tasks_with_extra": sum(s["extra"] > 0 for s in scores),
        "runaway": sum(s["runaway"] for s in scores),
        "finish_reasons": dict(Counter(r.get("finish_reason") or "error" for r in recs)),
        "errors": sum(r.get("error") is not None for r in recs),
        "latency_mean_s": statistics.mean(lat) if lat else 0.0,
        "latency_max_s": max(lat) if lat else 0.0,
        "completion_tokens": sum(r.get("completion_tokens") or 0 for r in recs),
        "prompt_tokens": sum(r.get("prompt_tokens") or 0 for r in recs),
    }


# ---- running ----------------------------------------------------------------------------------


def structserve_cmd(model: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "service", "serve", "--model", str(model), "--port", str(port)]


def structserve_env() -> dict[str, str]:
    return {
        "STRUCTSERVE_TOOL_FORMAT": "qwen",
        "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(ENGINE["max_total_tokens"]),
        "STRUCTSERVE_ENGINE__PAGE_SIZE": str(ENGINE["page_size"]),
        "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": str(ENGINE["max_running_requests"]),
        "STRUCTSERVE_DTYPE": ENGINE["dtype"],
        "STRUCTSERVE_LOG_LEVEL": "warning",
    }


def ask(
    client: OpenAI, model: str, task: dict[str, Any], tools: dict[str, dict[str, Any]], mode: str, max_tokens: int
) -> dict[str, Any]:
    """One greedy request; the response (or the error) as a plain record."""
    rec: dict[str, Any] = {"task": task["id"], "mode": mode, "error": None}
    t0 = time.perf_counter()
    try:
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": task["prompt"]}],
            tools=[tools[name] for name in task["tools"]],
            tool_choice=mode,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=max_tokens,
        )
        choice = resp.choices[0]
        rec.update(
            finish_reason=choice.finish_reason,
            content=choice.message.content,
            tool_calls=[
                {"name": c.function.name, "arguments": c.function.arguments} for c in choice.message.tool_calls or []
            ],
            completion_tokens=resp.usage.completion_tokens if resp.usage else None,
            prompt_tokens=resp.usage.prompt_tokens if resp.usage else None,
        )
    except Exception as exc:  # noqa: BLE001 - a failed request is a result, recorded as such
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["latency_s"] = time.perf_counter() - t0
    return rec


def run_server(
    name: str,
    model: Path,
    tasks: list[dict[str, Any]],
    tools: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    save: Callable[[list[dict[str, Any]], float], None],
) -> None:
    """Start the server, ask every (mode, task), ``save`` the records after each one, stop it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    if name == "sglang":
        proc = start(
            sglang_cmd(model, port, ENGINE, SGLANG_FLAGS),
            {},
            f"{base}/health_generate",
            Path("/tmp/bench-tool-calls-sglang.log"),
        )
    else:
        proc = start(
            structserve_cmd(model, port),
            structserve_env(),
            f"{base}/ready",
            Path("/tmp/bench-tool-calls-structserve.log"),
        )
    startup_s = time.perf_counter() - t0
    client = OpenAI(base_url=f"{base}/v1", api_key="none", timeout=1800, max_retries=0)
    recs = []
    try:
        jobs = [(mode, task) for mode in args.modes for task in tasks]
        for mode, task in tqdm(jobs, desc=name, unit="req"):
            rec = ask(client, model.name, task, tools, mode, args.max_tokens)
            rec["score"] = score(task, rec, tools)
            recs.append(rec)
            save(recs, startup_s)
    finally:
        stop(proc)


def rescore(saved: dict[str, Any], recs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Summaries of saved responses, scored again with today's scoring."""
    tools, tasks = load_tools(), {t["id"]: t for t in saved["tasks"]}
    for rec in recs:
        rec["score"] = score(tasks[rec["task"]], rec, tools)
    modes = dict.fromkeys(r["mode"] for r in recs)
    return {m: summarize([r for r in recs if r["mode"] == m]) for m in modes}


def table(summaries: dict[str, dict[str, dict[str, Any]]], title: str) -> Table:
    t = Table(title=title)
    for col in (
        "server",
        "tool_choice",
        "tasks",
        "with calls",
        "schema-valid calls",
        "exact match",
        "expected args match",
        "names match",
        "calls beyond expected",
        "runaway",
        "finish_reason",
        "latency mean / max s",
    ):
        t.add_column(col, justify="right")
    for server, modes in summaries.items():
        for mode, s in modes.items():
            fr = " ".join(f"{k}:{v}" for k, v in sorted(s["finish_reasons"].items()))
            t.add_row(
                server,
                mode,
                str(s["tasks"]),
                f"{s['with_calls']}/{s['tasks']}",
                f"{s['valid_calls']}/{s['calls']}",
                f"{s['exact']}/{s['tasks']}",
                f"{s['subset']}/{s['tasks']}",
                f"{s['names_match']}/{s['tasks']}",
                f"{s['extra_calls']} in {s['tasks_with_extra']} tasks",
                str(s["runaway"]),
                fr,
                f"{s['latency_mean_s']:.1f} / {s['latency_max_s']:.1f}",
            )
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: the qwen2.5-coder asset)")
    parser.add_argument("--servers", nargs="+", default=["structserve", "sglang"], choices=["structserve", "sglang"])
    parser.add_argument("--modes", nargs="+", default=["required", "auto"], choices=["required", "auto"])
    parser.add_argument("--tasks", type=int, default=0, help="only the first N tasks (0: all)")
    parser.add_argument("--only", nargs="+", default=None, help="only these task ids")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-tool-calls.json"))
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        help="run nothing: print one table from these saved result files",
    )
    args = parser.parse_args()
    if args.report:
        saved = [json.loads(p.read_text()) for p in args.report]
        summaries = {
            f"{name} ({p.stem})": rescore(r, s["responses"])
            for p, r in zip(args.report, saved)
            for name, s in r["servers"].items()
        }
        Console(width=240).print(table(summaries, f"tool calls: {Path(saved[0]['model']).name}"))
        return
    if args.model is None:
        from assets import model_dir

        args.model = model_dir("qwen2.5-coder")
    tools = load_tools()
    tasks = [t for t in load_tasks(tools) if args.only is None or t["id"] in args.only][: args.tasks or None]
    results: dict[str, Any] = {
        "model": str(args.model),
        "engine": ENGINE,
        "max_tokens": args.max_tokens,
        "tasks": tasks,
        "servers": {},
    }
    summaries: dict[str, dict[str, dict[str, Any]]] = {}
    for server in args.servers:

        def save(recs: list[dict[str, Any]], startup_s: float, server: str = server) -> None:
            modes = [m for m in args.modes if any(r["mode"] == m for r in recs)]
            summaries[server] = {m: summarize([r for r in recs if r["mode"] == m]) for m in modes}
            results["servers"][server] = {"startup_s": startup_s, "summary": summaries[server], "responses": recs}
            args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")

        run_server(server, args.model, tasks, tools, args, save)
    title = (
        f"tool calls: {args.model.name}, {len(tasks)} tasks, greedy, max_tokens {args.max_tokens}, {ENGINE['dtype']}"
    )
    console = Console(width=240)
    console.print(table(summaries, title))
    compare(results, console)
    print(f"responses: {args.out}")


if __name__ == "__main__":
    main()

"""Grammar fast-forward vs step-by-step constrained decoding, in one run.

Two in-process ``sglang.Engine`` workers on SmolLM2 (llguidance grammars, overlap schedule off,
``grammar.fast_forward`` on in one, with SGLang's mixed chunk as the service turns it on with it
(``--no-mixed-chunk``: without), off in the other), driven alternately round by round so both
see the same machine load. Workloads: ``tool_call`` (a call to one of three tools as a JSON
schema: ``anyOf`` of ``{"name": const, "arguments": {...}}``) and ``json`` (a nested record with
every property required), greedy, at concurrency 1 (requests one after another) and 8 (``--requests-c8``
requests, 8 in flight: the next starts when one ends, as a server's clients do; ``--one-batch``: one
batch of 8, which waits for its longest request). Per cell: completion tok/s (median and min-max
over rounds), the ratio, the share of completion tokens the grammar forced, forward passes (all,
and decode ones), outputs valid against the schema and outputs equal to step-by-step's.

    .venv/bin/python bench/structured_fast_forward.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.fast_forward_ties import describe, partings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [
    ("get_weather", {"city": {"type": "string", "maxLength": 24}, "unit": {"enum": ["celsius", "fahrenheit"]}}),
    (
        "search_flights",
        {
            "origin": {"type": "string", "maxLength": 16},
            "destination": {"type": "string", "maxLength": 16},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        },
    ),
    ("send_email", {"to": {"type": "string", "maxLength": 32}, "subject": {"type": "string", "maxLength": 40}}),
]
TOOL_CALL = {
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "name": {"const": name},
                "arguments": {
                    "type": "object",
                    "properties": args,
                    "required": list(args),
                    "additionalProperties": False,
                },
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, args in TOOLS
    ]
}
RECORD = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
        "director": {
            "type": "object",
            "properties": {
                "first_name": {"type": "string", "maxLength": 16},
                "last_name": {"type": "string", "maxLength": 16},
            },
            "required": ["first_name", "last_name"],
            "additionalProperties": False,
        },
        "genres": {
            "type": "array",
            "items": {"enum": ["drama", "comedy", "science_fiction", "documentary"]},
            "maxItems": 3,
        },
        "is_available_for_streaming": {"type": "boolean"},
    },
    "required": ["title", "year", "director", "genres", "is_available_for_streaming"],
    "additionalProperties": False,
}
PROMPTS = {
    "tool_call": [
        "What's the weather in Oslo?",
        "Book a flight from Rome to Lisbon for two.",
        "Email Ana that the meeting moved.",
        "Is it raining in Lima right now?",
        "Find flights from Boston to Denver.",
        "Tell bob@example.com the report is ready.",
        "How cold is it in Helsinki in fahrenheit?",
        "I need three seats from Paris to Nice.",
    ],
    "json": [
        f"Describe the film {t} as JSON."
        for t in ["Alien", "Amelie", "Heat", "Up", "Brazil", "Metropolis", "Casablanca", "Fargo"]
    ],
}
SCHEMAS = {"tool_call": TOOL_CALL, "json": RECORD}
OPENINGS = ("", "Quick question. ", "Hi! ")  # more requests than prompts: the prompts again, opened otherwise


def prompts_for(workload: str, n: int) -> list[str]:
    base = PROMPTS[workload]
    return [OPENINGS[(i // len(base)) % len(OPENINGS)] + base[i % len(base)] for i in range(n)]


def in_flight(engine: Any, prompts: list[str], params: dict[str, Any], extra: dict[str, Any], width: int) -> list:
    """Every prompt through ``engine.async_generate``, at most ``width`` at a time, in order."""
    import asyncio

    gate = asyncio.Semaphore(width)

    async def one(prompt: str) -> Any:
        async with gate:
            return await engine.async_generate(prompt=prompt, sampling_params=params, **extra)

    async def every() -> list:
        return list(await asyncio.gather(*(one(p) for p in prompts)))

    return asyncio.get_event_loop().run_until_complete(every())


def worker(mode: str, model_dir: str, max_tokens: int, mixed_chunk: bool = True) -> None:
    """Serve commands from stdin, one JSON line each: {"workload", "concurrency"}; answer one line."""
    sys.path.insert(0, str(ROOT))
    from tests.engine.sglang_fast_forward import fast_forward_report, start_engine

    engine = start_engine(Path(model_dir), mode == "on", "bfloat16", sglang_args={"enable_mixed_chunk": mixed_chunk})
    try:
        print("READY", flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            prompts = prompts_for(cmd["workload"], cmd["requests"])
            params = {
                "temperature": 0,
                "max_new_tokens": max_tokens,
                "json_schema": json.dumps(SCHEMAS[cmd["workload"]]),
            }
            extra = {"return_logprob": True, "top_logprobs_num": 2} if cmd.get("diagnose") else {}
            before = fast_forward_report(engine)
            start = time.perf_counter()
            if cmd["concurrency"] == 1:
                outs = [engine.generate(prompt=p, sampling_params=params, **extra) for p in prompts]
            elif cmd.get("one_batch"):
                outs = engine.generate(prompt=prompts, sampling_params=[params] * len(prompts), **extra)
            else:
                outs = in_flight(engine, prompts, params, extra, cmd["concurrency"])
            seconds = time.perf_counter() - start
            after = fast_forward_report(engine)
            print(
                "RESULT "
                + json.dumps(
                    {
                        "seconds": seconds,
                        "texts": [o["text"] for o in outs],
                        "tokens": sum(o["meta_info"]["completion_tokens"] for o in outs),
                        "decode_steps": after["decode_steps"] - before["decode_steps"],
                        "forwards": after["forward_passes"] - before["forward_passes"],
                        "forced": after["forced_tokens"] - before["forced_tokens"],
                        "ids": [o["output_ids"] for o in outs],
                        "top2": [
                            [[t[0] for t in pos[:2]] for pos in o["meta_info"].get("output_top_logprobs") or []]
                            for o in outs
                        ],
                    }
                ),
                flush=True,
            )
    finally:
        engine.shutdown()


def start_worker(mode: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", mode, "--model", args.model, "--max-tokens", str(args.max_tokens)]
        + ([] if args.mixed_chunk else ["--no-mixed-chunk"]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("READY"):
            return proc
    raise RuntimeError(f"{mode} worker exited ({proc.wait()})")


def ask(proc: subprocess.Popen[str], cmd: dict[str, Any]) -> dict[str, Any]:
    proc.stdin.write(json.dumps(cmd) + "\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError("worker exited")


def valid(text: str, schema: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def cell_row(workload: str, conc: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rate = {m: [r["tokens"] / r["seconds"] for r in runs[m]] for m in ("off", "on")}
    on, off = runs["on"], runs["off"]
    pairs = [(a, b) for r_on, r_off in zip(on, off) for a, b in zip(r_on["texts"], r_off["texts"])]
    return {
        "workload": workload,
        "conc": conc,
        "off": statistics.median(rate["off"]),
        "off_spread": (min(rate["off"]), max(rate["off"])),
        "on": statistics.median(rate["on"]),
        "on_spread": (min(rate["on"]), max(rate["on"])),
        "ratio": statistics.median(a / b for a, b in zip(rate["on"], rate["off"])),
        "forced_share": sum(r["forced"] for r in on) / sum(r["tokens"] for r in on),
        "steps_off": statistics.median(r["forwards"] for r in off),
        "steps_on": statistics.median(r["forwards"] for r in on),
        "decode_on": statistics.median(r["decode_steps"] for r in on),
        "valid": sum(valid(t, SCHEMAS[workload]) for r in on for t in r["texts"]),
        "equal": sum(a == b for a, b in pairs),
        "n": len(pairs),
    }


def print_table(rows: list[dict[str, Any]], rounds: int) -> None:
    print(f"\ncompletion tok/s, median (min-max) of {rounds} rounds; forward passes per round (decode ones)")
    print(
        "| workload | conc | step-by-step tok/s | fast-forward tok/s | ratio | forced share | forward passes "
        "off -> on (decode) | valid (ff) | equal to step-by-step |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workload']} | {r['conc']} | {r['off']:.1f} ({r['off_spread'][0]:.1f}-{r['off_spread'][1]:.1f}) "
            f"| {r['on']:.1f} ({r['on_spread'][0]:.1f}-{r['on_spread'][1]:.1f}) | {r['ratio']:.2f}x "
            f"| {100 * r['forced_share']:.0f} % | {r['steps_off']:.0f} -> {r['steps_on']:.0f} ({r['decode_on']:.0f}) "
            f"| {r['valid']}/{r['n']} | {r['equal']}/{r['n']} |"
        )


def request(workload: str, conc: int, args: argparse.Namespace) -> dict[str, Any]:
    n = args.requests_c1 if conc == 1 else 8 if args.one_batch else args.requests_c8
    return {"workload": workload, "concurrency": conc, "requests": n, "one_batch": args.one_batch}


def explain_differences(off: subprocess.Popen[str], cells: list[tuple[str, int]], runs: Any, args) -> None:
    """Each output of the last round that differs from step-by-step's: where, and how near a tie
    step-by-step's choice was there (``bench/fast_forward_ties.py``), from a re-run with logprobs."""
    print("\noutputs that differ from step-by-step (last round), with step-by-step's margin where they part:")
    for workload, conc in cells:
        again = ask(off, {**request(workload, conc, args), "diagnose": True})
        if again["texts"] != runs[(workload, conc)]["off"][-1]["texts"]:
            print(f"- {workload} at {conc}: step-by-step with logprobs wrote other texts; no margins")
            continue
        found = partings(runs[(workload, conc)]["on"][-1]["ids"], again["ids"], again["top2"])
        print("\n".join(describe(workload, conc, found)) or f"- {workload} at {conc}: none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--requests-c1", type=int, default=4, help="requests run one after another at concurrency 1")
    parser.add_argument("--requests-c8", type=int, default=24, help="requests at concurrency 8, 8 in flight")
    parser.add_argument("--one-batch", action="store_true", help="concurrency 8 as one batch of 8 requests")
    parser.add_argument("--model", default=None)
    parser.add_argument(
        "--no-mixed-chunk",
        dest="mixed_chunk",
        action="store_false",
        help="the fast-forward engine without SGLang's mixed chunk (the service turns it on with fast-forward)",
    )
    parser.add_argument("--worker", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        sys.path.insert(0, str(ROOT))
        from assets import fetch

        args.model = str(fetch().smollm2)
    if args.worker:
        worker(args.worker, args.model, args.max_tokens, args.mixed_chunk and args.worker == "on")
        return
    procs = {mode: start_worker(mode, args) for mode in ("off", "on")}
    cells = [(w, c) for w in ("tool_call", "json") for c in (1, 8)]
    runs: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {cell: {"off": [], "on": []} for cell in cells}
    try:
        for rnd in range(args.rounds):
            for workload, conc in cells:
                cmd = request(workload, conc, args)
                order = ("off", "on") if rnd % 2 == 0 else ("on", "off")
                for mode in order:
                    runs[(workload, conc)][mode].append(ask(procs[mode], cmd))
            print_table([cell_row(w, c, runs[(w, c)]) for w, c in cells], rnd + 1)  # so far
        explain_differences(procs["off"], cells, runs, args)
    finally:
        for proc in procs.values():
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=120)


if __name__ == "__main__":
    main()

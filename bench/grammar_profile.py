"""Where a grammar's per-token cost goes in SGLang's scheduler, before and after
``runtime_ext/fixes/grammar_token_sync.py``.

Two servers on SmolLM2 (bf16, overlap scheduler on), one after the other: SGLang's behaviour
(``STRUCTSERVE_GRAMMAR_TOKEN_SYNC=always``) and structserve's (the all-reduce of grammar tokens
skipped on one rank). On each, alternating windows of free and ``json_schema`` decoding at one
concurrency (the request of ``bench/structured_overhead.py``); each window is run twice, once
timed and once while py-spy samples the scheduler process. It prints, per server:
- the per-token decode time of the timed windows' streams (median), free vs json_schema;
- the share of the scheduler's event-loop samples in each part of the grammar path.

    .venv/bin/pip install py-spy    # once
    .venv/bin/python bench/grammar_profile.py --concurrency 8 --windows 2 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from structured_overhead import decode_round  # noqa: E402

from tests.server import ServerProcess  # noqa: E402

LOOP = "Scheduler.event_loop_overlap"
PARTS = {  # row -> the frame whose inclusive samples it counts
    "grammar sampling (launch_batch_sample_if_needed)": "Scheduler.launch_batch_sample_if_needed",
    "  mask: fill + apply (_preprocess_logits)": "ModelRunner._preprocess_logits",
    "  token all-reduce (_sync_token_ids_across_tp)": "Sampler._sync_token_ids_across_tp",
    "grammar accept (_accept_grammar_tokens)": "SchedulerBatchResultProcessor._accept_grammar_tokens",
    "sampling (ModelRunner.sample)": "ModelRunner.sample",
    "forward (ModelRunner.forward)": "ModelRunner.forward",
}
SERVERS = {"SGLang (all-reduce on one rank)": "always", "structserve (skipped on one rank)": "rank"}


def frames(line: str) -> tuple[set[str], int]:
    stack, _, count = line.rstrip().rpartition(" ")
    return {f.split(" (")[0] for f in stack.split(";")}, int(count)


def shares(path: Path) -> dict[str, float]:
    """Inclusive samples of each part, as a share of the samples inside the scheduler's loop."""
    counts: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        names, n = frames(line)
        if LOOP in names:
            counts[LOOP] += n
            counts.update({row: n for row, frame in PARTS.items() if frame in names})
    return {row: counts[row] / max(counts[LOOP], 1) for row in PARTS}


def window(server: ServerProcess, conc: int, seconds: float, constrained: bool) -> list[float]:
    """Per-token decode times of the streams run for ``seconds``."""
    per_token: list[float] = []
    end = time.time() + seconds
    while time.time() < end:
        per_token += asyncio.run(decode_round(server, conc, 64, constrained))[0]
    return per_token


def profiled(pid: int, seconds: float, out: Path, run) -> None:
    """``run()`` while py-spy samples ``pid`` (non-blocking: the process is not paused)."""
    spy = [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(pid), "-d", str(int(seconds) + 1)]
    proc = subprocess.Popen(
        spy + ["--nonblocking", "-r", "100", "-f", "raw", "-o", str(out)], stdout=subprocess.DEVNULL
    )
    run()
    proc.wait()


def scheduler_pid(server: ServerProcess) -> int:
    import psutil

    children = psutil.Process(server.proc.pid).children(recursive=True)
    return next(p.pid for p in children if p.name() == "sglang::scheduler")


def run_server(model: Path, sync: str, args: argparse.Namespace, work: Path) -> dict:
    server = ServerProcess(model, name=f"grammar-profile-{sync}", env={"STRUCTSERVE_GRAMMAR_TOKEN_SYNC": sync})
    server.start()
    times: dict[bool, list[float]] = {False: [], True: []}
    profiles: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    try:
        asyncio.run(decode_round(server, 1, 8, True))  # compile, caches
        pid = scheduler_pid(server)
        for w in tqdm(range(args.windows * 2), desc=sync):
            constrained = w % 2 == (w // 2) % 2  # json, free, free, json, ...
            times[constrained] += window(server, args.concurrency, args.seconds, constrained)  # not profiled
            out = work / f"{sync}-{w}.txt"
            profiled(pid, args.seconds, out, lambda: window(server, args.concurrency, args.seconds, constrained))
            profiles[constrained].append(shares(out))
    finally:
        server.stop()
    mean = {k: {row: statistics.mean(p[row] for p in v) for row in PARTS} for k, v in profiles.items()}
    return {"free": statistics.median(times[False]) * 1e3, "json": statistics.median(times[True]) * 1e3, **mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--windows", type=int, default=2, help="profiled windows per mode and server")
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    from assets import fetch

    work = Path("/tmp/structserve-bench-grammar-profile")
    work.mkdir(parents=True, exist_ok=True)
    model = fetch(["smollm2"]).smollm2
    results = {name: run_server(model, sync, args, work) for name, sync in SERVERS.items()}
    console = Console(width=160)
    table = Table(title=f"decode per token, concurrency {args.concurrency}, SmolLM2 bf16 (median over streams)")
    for col in ("server", "free ms/token", "json_schema ms/token", "overhead"):
        table.add_column(col, justify="right")
    for name, r in results.items():
        table.add_row(name, f"{r['free']:.2f}", f"{r['json']:.2f}", f"{(r['json'] / r['free'] - 1) * 100:+.1f}%")
    console.print(table)
    table = Table(title="share of the scheduler loop's samples (py-spy, mean over windows)")
    table.add_column("part")
    for name in results:
        table.add_column(f"{name}: free", justify="right")
        table.add_column("json_schema", justify="right")
    for row in PARTS:
        table.add_row(row, *(f"{100 * r[k][row]:.2f}%" for r in results.values() for k in (False, True)))
    extra = [100 * (grammar_path(r[True]) - r[False][SAMPLE]) for r in results.values()]
    table.add_row("grammar path beyond free sampling", *(x for e in extra for x in ("", f"{e:.2f}%")))
    console.print(table)


SAMPLE = "sampling (ModelRunner.sample)"


def grammar_path(share: dict[str, float]) -> float:
    """A json_schema window's sampling + accept (the free window's counterpart is its sampling)."""
    return share["grammar sampling (launch_batch_sample_if_needed)"] + share["grammar accept (_accept_grammar_tokens)"]


if __name__ == "__main__":
    main()

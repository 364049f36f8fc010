"""Real-world schema coverage, model-free: JSONSchemaBench's MaskBench schemas through
structserve's grammar check, beside llguidance alone and xgrammar alone.

For each schema and library: served or refused (and why), which library the grammar check routed it to,
compile time (the worker's CPU time for policy + translation + grammar build for the tokenizer, so
a busy machine does not inflate it), and MaskBench's labelled
instances walked token by token through the real matcher of the served grammar (SmolLM2's
tokenizer by default): valid instances refused, invalid instances accepted. A refused schema's
instances are not counted (nothing would be generated).

Each (schema, library) runs in one worker process with the grammar check's CPU-time budget
(``grammars.compile.worker_clock``): a compile past ``--timeout`` is a refusal (the grammar check's 400),
and the worker is replaced. The data is not shipped: pass MaskBench's ``data`` folder
(``maskbench/data`` of a JSONSchemaBench checkout) with ``--data``.

    .venv/bin/python bench/schema_coverage.py --data ~/jsonschemabench/maskbench/data
    .venv/bin/python bench/schema_coverage.py --limit 40 --subsets Kubernetes Snowplow
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from schema_coverage_libs import LIBRARIES, worker_main  # noqa: E402
from schema_coverage_tally import ALL, VALIDATED, Case, Outcome, Tally, load_cases, percentile, tally  # noqa: E402

DEFAULT_DATA = Path.home() / ".cache" / "structserve" / "jsonschemabench" / "maskbench" / "data"
WALK_BUDGET_S = 60.0
"""CPU seconds a served grammar may spend walking one schema's instances."""


class Worker:
    """One worker process (``schema_coverage_libs.worker_main``), replaced after a timeout."""

    def __init__(self, model: Path) -> None:
        self.model = model
        self._start()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, str(self.model)), daemon=True)
        self.proc.start()
        child.close()
        self.conn.recv()  # ("ready",)

    def restart(self) -> None:
        self.proc.kill()
        self.proc.join()
        self._start()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()

    def reply(self, timeout_s: float) -> tuple[Any, ...] | None:
        """The next reply, or None (worker replaced) when it used ``timeout_s`` of CPU budget,
        or the machine was too busy to give it that budget in time."""
        from grammars.compile.worker_clock import cpu_seconds, wait_reply
        from grammars.errors import CompilerBusyError

        pid = self.proc.pid or 0
        try:
            ready = wait_reply(self.conn, pid, cpu_seconds(pid), timeout_s)
        except CompilerBusyError:
            ready = False
        if ready:
            try:
                return tuple(self.conn.recv())
            except EOFError:
                pass
        self.restart()
        return None


def evaluate(worker: Worker, case: Case, library: str, timeout_s: float) -> Outcome:
    worker.conn.send((library, case.schema, case.valid, case.invalid))
    base = Outcome(case.subset, case.name, library, served=False)
    compiled = worker.reply(timeout_s)
    if compiled is None:
        return replace(base, reason=f"timeout: no grammar within {timeout_s:g} s of CPU budget")
    _, route, reason, ms = compiled
    if not route:
        return replace(base, reason=reason, compile_ms=ms)
    walked = worker.reply(WALK_BUDGET_S)
    if walked is None:
        return replace(base, route=route, reason="timeout: walking the instances", compile_ms=ms)
    _, refused, accepted, examples = walked
    return replace(
        base,
        served=True,
        route=route,
        compile_ms=ms,
        valid=len(case.valid),
        invalid=len(case.invalid),
        valid_refused=refused,
        invalid_accepted=accepted,
        examples=tuple(examples),
    )


def run(cases: list[Case], libraries: list[str], model: Path, timeout_s: float, log: Path | None) -> list[Outcome]:
    """Every (case, library) outcome; each also appended to ``log`` (JSON lines) as it comes, so
    an interrupted run keeps what it measured. SIGTERM stops it like Ctrl-C (the worker too)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    worker = Worker(model)
    outcomes = []
    try:
        with open(log or os.devnull, "w") as sink:
            for case in tqdm(cases, desc="schemas", unit="schema"):
                for library in libraries:
                    outcomes.append(evaluate(worker, case, library, timeout_s))
                    sink.write(json.dumps(asdict(outcomes[-1])) + "\n")
                    sink.flush()
    finally:
        worker.close()
    return outcomes


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def table(results: dict[tuple[str, str], Tally], title: str) -> Table:
    out = Table(title=title)
    for col in ("subset", "library", "schemas", "served", "served %", "routes", "compile p50 CPU ms",
                "compile p99 CPU ms", "compile max CPU ms", "valid refused", "invalid accepted",
                "caught by validation"):  # fmt: skip
        out.add_column(col, justify="right")
    for (subset, library), row in sorted(results.items(), key=lambda kv: (kv[0][0] == ALL, kv[0])):
        ours = library.startswith("structserve")
        routes = " ".join(f"{_short(k)} {v}" for k, v in sorted(row.routes.items())) if ours else ""
        out.add_row(
            subset,
            library,
            str(row.schemas),
            str(row.served),
            _fmt(row.served_pct, 1),
            routes,
            _fmt(percentile(row.compile_ms, 50), 1),
            _fmt(percentile(row.compile_ms, 99), 1),
            _fmt(max(row.compile_ms, default=math.nan), 1),
            f"{row.valid_refused}/{row.valid}",
            f"{row.invalid_accepted}/{row.invalid}",
            f"{row.caught}/{row.invalid_validated}",
        )
    return out


def _short(route: str) -> str:
    return route.replace("llguidance", "llg").replace("xgrammar", "xgr").replace(VALIDATED, "+val")


def plot(results: dict[tuple[str, str], Tally], libraries: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subsets = sorted({s for s, _ in results if s != ALL}) + [ALL]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / len(libraries)
    for i, library in enumerate(libraries):
        rows = [results.get((s, library), Tally()) for s in subsets]
        xs = [x + i * width for x in range(len(subsets))]
        axes[0].bar(xs, [r.served_pct for r in rows], width, label=library)
        wrong = [100.0 * r.invalid_accepted / r.invalid if r.invalid else 0.0 for r in rows]
        axes[1].bar(xs, wrong, width, label=library)
    for ax, label in ((axes[0], "schemas served, %"), (axes[1], "invalid instances accepted, % of served")):
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(subsets))], subsets, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(label)
    axes[0].axhline(95, color="grey", linestyle=":", linewidth=1)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def report(outcomes: list[Outcome], libraries: list[str], console: Console) -> dict[tuple[str, str], Tally]:
    results = tally(outcomes)
    console.print(table(results, "MaskBench schemas: served, compile time, instances through the real matcher"))
    check = results.get((ALL, "structserve"))
    if check is not None:
        console.print(
            "[bold]structserve refusals: schemas per reason (a schema counts under each of its keywords)[/bold]"
        )
        for reason, count in check.reasons.most_common(15):
            console.print(f"  {count:5d}  {reason}")
    for outcome in outcomes:
        if outcome.library == "structserve" and outcome.examples:
            console.print(f"[dim]{outcome.name} ({outcome.route}): {'; '.join(outcome.examples)}[/dim]")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="MaskBench's data folder")
    parser.add_argument("--limit", type=int, default=None, help="at most N schemas per subset (stable sample)")
    parser.add_argument("--subsets", nargs="+", default=None, help="only these subsets (e.g. Kubernetes)")
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="compile budget per schema, s (the grammar check's)"
    )
    parser.add_argument("--model", type=Path, default=None, help="tokenizer/model dir (default: SmolLM2)")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "schema_coverage.png")
    parser.add_argument("--jsonl", type=Path, default=None, help="also write every outcome here, as it comes")
    args = parser.parse_args()
    if not args.data.is_dir():
        parser.error(f"{args.data} is not a folder: pass MaskBench's data folder with --data (docs/benchmarks.md)")
    cases = load_cases(args.data, args.subsets, args.limit)
    if not cases:
        parser.error(f"no MaskBench schemas in {args.data} for subsets {args.subsets}")
    if args.model is None:
        from assets import model_dir

        args.model = model_dir("smollm2")
    began = time.perf_counter()
    outcomes = run(cases, args.libraries, args.model, args.timeout, args.jsonl)
    console = Console(width=200)
    results = report(outcomes, args.libraries, console)
    console.print(f"{len(cases)} schemas x {len(args.libraries)} libraries in {time.perf_counter() - began:.0f} s")
    plot(results, args.libraries, args.png)


if __name__ == "__main__":
    main()

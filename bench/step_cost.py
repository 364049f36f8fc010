"""Where one decode step of structserve goes, at concurrency 1, 8 and 32 (SmolLM2, bf16, CPU).

For each level, ``--rounds`` times: the serving bench's streamed chat requests
(``bench/serve_overhead.py``'s prompts and client, ``--max-tokens`` each) while py-spy samples the
scheduler, the front (HTTP + SGLang's tokenizer manager: one process) and the detokenizer
(``--nonblocking``: the processes are never paused). The decode steps in the window come from
runtime_ext's own counter (``structserve_attention_decode_calls`` / layers), so

    ms per step = wall / steps = busy + idle, where busy = the scheduler main thread's CPU time
    over the load (``/proc``) / steps, split by the shares of its busy py-spy samples
    (``bench/step_cost_rules.py``): model forward (attention, linear + MLP, logits, sampling,
    other) vs the scheduler's own Python (batch + KV alloc, output processing, grammar, request
    intake, other). py-spy runs from 1 s before the load to after it, so its idle samples are not
    the load's.

Each process's CPU time over the window (cores busy, from ``/proc``) is printed beside it: on 2
cores the front and the detokenizer compete with the scheduler for CPU. HF ``generate`` on the
same prompts, batch = concurrency, gives the no-server per-step cost: (t(N tokens) - t(1 token)) /
(N - 1), in the same run.
Prints a table (median over rounds, min-max) and writes ``docs/img/step_cost.png`` (stacked bars).

    .venv/bin/python bench/step_cost.py        # installs py-spy (requirements/optional/bench.txt)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.serve_overhead import prompts, run_level  # noqa: E402
from bench.servers import launch, stop  # noqa: E402
from bench.step_cost_rules import PARTS, main_thread, parse_raw, shares  # noqa: E402
from tests.server import free_port  # noqa: E402

PY_SPY = Path(sys.executable).parent / "py-spy"
LAYERS = 30  # SmolLM2-135M


def ensure_py_spy() -> None:
    if not PY_SPY.exists():
        pin = (ROOT / "requirements/optional/bench.txt").read_text().split("\n")
        spec = next(line for line in pin if line and not line.startswith("#"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", spec], check=True)  # it has none


def processes(server: subprocess.Popen) -> dict[str, int]:
    """front / scheduler / detokenizer pids of a structserve server."""
    root = psutil.Process(server.pid)
    found = {"front": root.pid}
    for child in root.children(recursive=True):
        title = " ".join(child.cmdline())
        for name in ("scheduler", "detokenizer"):
            if f"sglang::{name}" in title:
                found[name] = child.pid
    return found


def thread_cpu(pid: int, tid: int) -> float:
    """CPU seconds thread ``tid`` of process ``pid`` has run (user + system)."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def decode_calls(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("structserve_attention_decode_calls{")
    )


def sample(pids: dict[str, int], out: Path, rate: int) -> dict[str, subprocess.Popen]:
    spies = {}
    for name, pid in pids.items():
        cmd = [str(PY_SPY), "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking", "--idle", "--threads"]
        cmd += ["--format", "raw"]
        cmd += ["--output", str(out / f"{name}.txt")]
        spies[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attached
    return spies


def collect(spies: dict[str, subprocess.Popen], out: Path) -> dict:
    for spy in spies.values():
        spy.send_signal(signal.SIGINT)
    for spy in spies.values():
        spy.wait(timeout=60)
    return {name: parse_raw((out / f"{name}.txt").read_text().splitlines()) for name in spies}


def one_round(base: str, model: str, pids: dict[str, int], texts: list[str], c: int, args, out: Path) -> dict:
    procs = {name: psutil.Process(pid) for name, pid in pids.items()}
    cpu0 = {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
    spies = sample(pids, out, args.rate)
    before = decode_calls(base)
    main0 = thread_cpu(pids["scheduler"], pids["scheduler"])  # its event loop runs on the main thread
    result = asyncio.run(run_level(base, model, texts, c, args.max_tokens))
    main_s = thread_cpu(pids["scheduler"], pids["scheduler"]) - main0
    steps = (decode_calls(base) - before) / LAYERS
    stacks = collect(spies, out)
    cpu = {name: sum(p.cpu_times()[:2]) - cpu0[name] for name, p in procs.items()}
    parts, idle = shares(main_thread(stacks["scheduler"]))
    ms = 1000 * result.wall_s / max(steps, 1)
    busy_ms = min(ms, 1000 * main_s / max(steps, 1))
    row = {p: parts[p] / max(1 - idle, 1e-9) * busy_ms for p in PARTS}  # shares of the busy samples
    row["idle"] = ms - busy_ms
    row["ms/step"] = ms
    row["tok/s"] = result.completion_tokens / result.wall_s
    window = result.wall_s + 1.0  # py-spy attaches 1 s before the load (CPU time is counted from there)
    for name in ("scheduler", "front", "detokenizer"):
        row[f"{name} CPU"] = cpu.get(name, 0.0) / window  # cores busy: 1.0 = one core all the time
    return row


def hf_step_ms(model: Path, texts: list[str], batch: int, new: int) -> float:
    """HF generate's decode cost per step at ``batch``: (t(new) - t(1)) / (new - 1), best of 2."""
    from hf_generate import _batch, _load

    tok, hf = _load(model)
    chunk = texts[:batch]
    _batch(tok, hf, chunk, 2)  # warm-up
    times = {}
    for n in (1, new):
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            _batch(tok, hf, chunk, n)
            best = min(best, time.perf_counter() - t0)
        times[n] = best
    return 1000 * (times[new] - times[1]) / (new - 1)


def table(rows: dict[int, list[dict]], hf: dict[int, float]) -> Table:
    t = Table(title="One decode step of structserve (ms; median over rounds, min–max), beside HF generate")
    cols = ["ms/step", *PARTS, "idle", "scheduler CPU", "front CPU", "detokenizer CPU", "tok/s"]
    t.add_column("conc", justify="right")
    for col in [*cols, "non-model share", "HF ms/step"]:
        t.add_column(col, justify="right")
    for c, rounds in rows.items():
        cells = []
        for col in cols:
            vals = [r[col] for r in rounds]
            fmt = "{:.2f}" if "CPU" in col else "{:.1f}"
            med = fmt.format(statistics.median(vals))
            cells.append(med + (f" ({fmt.format(min(vals))}–{fmt.format(max(vals))})" if len(vals) > 1 else ""))
        model = statistics.median(sum(r[p] for p in PARTS if p.startswith("model")) for r in rounds)
        step = statistics.median(r["ms/step"] for r in rounds)
        t.add_row(str(c), *cells, f"{1 - model / step:.0%}", f"{hf[c]:.1f}")
    return t


def plot(rows: dict[int, list[dict]], hf: dict[int, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = list(rows)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    x = range(len(levels))
    bottom = [0.0] * len(levels)
    colors = dict(zip([*PARTS, "idle"], [*plt.get_cmap("tab10").colors, "lightgrey"]))
    for part in [*PARTS, "idle"]:
        vals = [statistics.median(r[part] for r in rows[c]) for c in levels]
        ax.bar([i - 0.18 for i in x], vals, 0.36, bottom=bottom, label=part, color=colors[part])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.bar([i + 0.18 for i in x], [hf[c] for c in levels], 0.36, color="black", label="HF generate (whole step)")
    ax.set_xticks(list(x), [f"concurrency {c}" for c in levels])
    ax.set_ylabel("ms per decode step")
    ax.set_title("structserve decode step (SmolLM2-135M bf16, 2-core CPU) vs HF generate")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second (each costs CPU)")
    parser.add_argument("--png", type=Path, default=ROOT / "docs/img/step_cost.png")
    args = parser.parse_args()
    from assets import fetch

    ensure_py_spy()
    model = fetch(["smollm2"]).smollm2
    texts = prompts(2 * max(args.concurrency) + 2)
    port = free_port()
    server = launch("structserve", model, port)
    base, out = f"http://127.0.0.1:{port}", Path(os.environ.get("TMPDIR", "/tmp")) / "step_cost"
    out.mkdir(exist_ok=True)
    rows: dict[int, list[dict]] = {}
    try:
        pids = processes(server)
        for c in args.concurrency:
            level = texts[: max(8, 2 * c)]
            rows[c] = [one_round(base, model.name, pids, level, c, args, out) for _ in range(args.rounds)]
    finally:
        stop(server)
    hf = {c: hf_step_ms(model, texts, c, args.max_tokens) for c in args.concurrency}
    Console(width=240).print(table(rows, hf))
    plot(rows, hf, args.png)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()

"""The online outlier monitor (quant.monitor) on SmolLM2, W8A8: overhead, fallback effect, switch.

1. **Overhead.** W8A8 (bf16) with the monitor off and on (sigma 4, the default thresholds, no
   standby copies), as alternating engines (off, on, off, on; the best of each). It measures
   prefill tokens/s over held-out windows, and decode tokens/s at batch 1 and batch 8.
2. **Fallback effect.** It runs on a model copy with activation outliers (``bench/quant_monitor_models.py``):
   - ``--workload channel`` (the one the goal is measured on): an outlier channel at the input of
     three ``down_proj`` modules, made by a power-of-two rescaling that leaves the bf16 model exact;
   - ``--workload comma``: a massive activation on the ',' token's embedding, which the residual
     stream carries into every layer. With ``--drift`` the warm-up text has no ','.
   Three engines serve it: all INT8, INT8 + the online fallback (every module may fall back),
   and bf16. Each first serves a warm-up of calibration text, one request at a time, then the
   held-out windows, and reports their perplexity; the table lists the modules that fell back.
   The channel workload adds two rows: INT8 with only the seeded modules kept in bf16 (what the
   seeded outliers alone cost), and the original model in bf16 (the copy's bf16 equals it).
3. **Switch.** Steps from the decision to the first high-precision forward (events), and the
   per-layer cost in ``apply``: the flag read and ``observe``.

``--neurons-on disjoint`` picks the channel workload's outlier neurons on calibration text that
neither the warm-up nor the held-out text contains; ``--standby-share 0.1`` keeps standby copies
only within 10 % of the linear weights' bytes, ranked by a sensitivity scan of the warm-up text
(as ``quant.monitor.max_fallback_bytes`` and ``quant.sensitive_layers`` do in the service).

Writes ``docs/img/quant_monitor_rates[_channel][_drift][_disjoint][_standbyF].png``: the outlier rate
of the tripped modules per request, with the fallback marked.

    .venv/bin/python bench/quant_monitor.py                                 # overhead + effect, boost 40
    .venv/bin/python bench/quant_monitor.py --skip-overhead --workload channel            # x256, layers 2,9,16
    .venv/bin/python bench/quant_monitor.py --skip-overhead --boost 300 --drift
    .venv/bin/python bench/quant_monitor.py --skip-overhead --workload channel --neurons-on disjoint --standby-share 0.1
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import timeit
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
WORK = Path("/tmp/structserve-bench-monitor")
DEFAULT = {"sigma": 4.0, "rate_threshold": 0.01, "window_requests": 1000, "min_window_tokens": 256}


def start_engine(model: Path, quantized: bool, monitor: dict | None, events: Path | None = None, keep=()):
    """An in-process engine (bf16, torch_native attention); W8A8 when ``quantized``, but ``keep``."""
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.quant.monitor import MonitorConfig
    from runtime_ext.quant.policy import QuantPolicy
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    config = None
    if monitor is not None:
        config = MonitorConfig(enabled=True, **monitor, events_path=str(events) if events else None)
    runtime = replace(
        RuntimeExtConfig.from_env(), quant_policy=QuantPolicy("w8a8_dynamic", keep=tuple(keep)), quant_monitor=config
    )
    runtime.export()
    options = EngineOptions(
        model_path=model,
        dtype="bfloat16",
        engine=EngineSettings(max_total_tokens=16384),
        quantization="structserve_w8a8_dynamic" if quantized else None,
    )
    return sglang.Engine(**options.engine_kwargs())


def all_modules(model: Path) -> tuple[str, ...]:
    """Every quantized SGLang module of ``model`` (fused names), for a standby copy each."""
    from runtime_ext.quant.policy import fused_module, linear_layer_names
    from service.startup import ModelInfo

    return tuple(sorted({fused_module(n)[0] for n in linear_layer_names(list(ModelInfo.read(model).tensors))}))


def quant_report(engine) -> dict:
    from runtime_ext.plugin import INTERNAL_STATE_KEY

    return engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]["quant"]


def speeds(engine, windows: list[list[int]]) -> dict[str, float]:
    start = time.perf_counter()
    for ids in windows:
        engine.generate(input_ids=[ids], sampling_params={"max_new_tokens": 1})
    prefill = sum(len(w) for w in windows) / (time.perf_counter() - start)
    params = {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}
    out = {"prefill": prefill}
    for batch in (1, 8):
        best = 0.0
        for _ in range(2):
            start = time.perf_counter()
            res = engine.generate(input_ids=[w[:64] for w in windows[:batch]], sampling_params=params)
            best = max(best, sum(r["meta_info"]["completion_tokens"] for r in res) / (time.perf_counter() - start))
        out[f"decode bs{batch}"] = best
    return out


def overhead(base: Path, windows: list[list[int]]) -> dict[str, dict[str, float]]:
    best: dict[str, dict[str, float]] = {}
    for name in tqdm(["off", "on", "off", "on"], desc="overhead engines"):
        engine = start_engine(base, True, {**DEFAULT} if name == "on" else None)
        try:
            engine.generate(input_ids=[windows[0][:32]], sampling_params={"max_new_tokens": 4})
            got = speeds(engine, windows)
        finally:
            engine.shutdown()
        best[name] = {k: max(v, best.get(name, {}).get(k, 0.0)) for k, v in got.items()}
    return best


def perplexity(engine, windows: list[list[int]], after_each=lambda: None) -> float:
    logprobs: list[float] = []
    for ids in windows:
        out = engine.generate(
            input_ids=[ids], sampling_params={"max_new_tokens": 1}, return_logprob=True, logprob_start_len=0
        )[0]
        logprobs += [lp[0] for lp in out["meta_info"]["input_token_logprobs"] if lp[0] is not None]
        after_each()
    return math.exp(-sum(logprobs) / len(logprobs))


def standby_within(model: Path, text: str, share: float) -> tuple[str, ...]:
    """The standby copies a deployment keeps at ``max_fallback_bytes`` = ``share`` of the linear
    weights' bf16 bytes: the modules a sensitivity scan of ``text`` ranks first (KL with only that
    layer quantized; ``structserve quant scan``), as the service's startup plans them."""
    from runtime_ext.quant.monitor import kl_ranking, standby_plan
    from runtime_ext.quant.policy import QuantPolicy
    from service.startup import ModelInfo, module_bytes
    from tools.quant.offline import scan

    sizes = module_bytes(ModelInfo.read(model), "bfloat16")
    scores = scan(model, text, QuantPolicy("w8a8_dynamic"), progress=lambda it: tqdm(it, desc="sensitivity scan"))
    budget = int(share * sum(sizes.values()))
    standby, _, extra = standby_plan(sizes, (), kl_ranking(sizes, scores), budget)
    print(f"standby: {len(standby)} of {len(sizes)} modules, {extra / 2**20:.1f} MiB within {budget / 2**20:.1f} MiB")
    return standby


def effect_row(model: Path, kind: str, warmup: list[list[int]], held: list[list[int]], keep=(), standby=()) -> dict:
    """Warm-up requests (rates recorded after each), then held-out perplexity."""
    events = WORK / f"events-{kind}.jsonl"
    events.unlink(missing_ok=True)
    monitor = {**DEFAULT, "standby": standby} if kind == "INT8 + online fallback" else None
    engine = start_engine(model, not kind.startswith("bf16"), monitor, events, keep)
    try:
        history: list[dict[str, float]] = []

        def record() -> None:
            if monitor is not None:
                history.append({n: s["rate"] for n, s in quant_report(engine)["monitor"]["layers"].items()})

        for ids in tqdm(warmup, desc=f"{kind}: warm-up"):
            engine.generate(input_ids=[ids], sampling_params={"max_new_tokens": 1})
            record()
        ppl = perplexity(engine, held, record)
        report = quant_report(engine).get("monitor", {})
    finally:
        engine.shutdown()
    lines = events.read_text().splitlines() if events.is_file() else []
    recorded = [json.loads(line) for line in lines]
    return {"ppl": ppl, "history": history, "report": report, "events": recorded, "keep": list(keep)}


def select_cost() -> dict[str, float]:
    """Microseconds per call: the flag read in ``apply``, and ``observe`` on a decode/prefill input."""
    import torch

    from runtime_ext.quant.fallback import FallbackController
    from runtime_ext.quant.monitor import MonitorConfig

    layer = torch.nn.Linear(576, 576, bias=False)
    ctl = FallbackController(MonitorConfig(enabled=True))
    ctl.attach(layer, "model.layers.0.self_attn.o_proj", starts_high=False)
    out = {"flag read": timeit.timeit(lambda: getattr(layer, "use_standby", False), number=100000) * 10}
    for rows in (8, 512):
        x = torch.randn(rows, 576, dtype=torch.bfloat16)
        ctl.observe(layer, x)
        out[f"observe [{rows}, 576]"] = timeit.timeit(lambda: ctl.observe(layer, x), number=2000) / 2000 * 1e6
    return out


def plot(history: list[dict[str, float]], events: list[dict], warmup: int, path: Path, seeded=()) -> None:
    """Each tripped module's window rate per request (the ``seeded`` ones first, bold), ▼ at its fallback."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    switched = {e["module"]: e["step"] - 1 for e in events if e["kind"] == "fallback"}  # one step per request
    tripped = sorted(switched, key=lambda m: (m not in seeded, m))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in tripped[:12]:
        rates = [100 * h.get(name, 0.0) for h in history]
        label = name.replace("model.layers.", "L") + (" (seeded)" if name in seeded else "")
        (line,) = ax.plot(rates, label=label, lw=2.2 if name in seeded else 1)
        at = min(switched[name], len(rates) - 1)
        ax.plot([at], [rates[at]], marker="v", ms=7, color=line.get_color())  # the fallback
    ax.axhline(100 * DEFAULT["rate_threshold"], color="k", ls="--", lw=0.8, label="rate threshold")
    ax.axvline(warmup - 0.5, color="grey", lw=0.8, label="warm-up | held-out text")
    first = min((e["step"] for e in events if e["kind"] == "fallback"), default=None)
    ax.set_title(f"Outlier rate of the modules that fell back ({len(tripped)}; ▼ = fallback, first at step {first})")
    ax.set_xlabel("request (one forward each: warm-up, then the held-out windows)")
    ax.set_ylabel("window outlier rate (%)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    args = parse_args()
    from transformers import AutoTokenizer

    from assets import calibration_text, eval_text, fetch

    WORK.mkdir(parents=True, exist_ok=True)
    base = fetch(["smollm2", "austen"]).smollm2
    tok = AutoTokenizer.from_pretrained(str(base))
    held_ids = tok.encode(eval_text()[: args.windows * args.window * 8], add_special_tokens=False)
    held = [held_ids[i * args.window : (i + 1) * args.window] for i in range(args.windows)]
    text = calibration_text()[: 2 * args.warmup * 128 * 8]
    calib = tok.encode(text.replace(",", "") if args.drift else text, add_special_tokens=False)
    warmup = [calib[i * 128 : (i + 1) * 128] for i in range(args.warmup)]
    # --neurons-on disjoint: the next calibration tokens, which neither the warm-up nor the held-out text contain
    disjoint = [calib[i * 128 : (i + 1) * 128] for i in range(args.warmup, 2 * args.warmup)]
    console = Console(width=160)
    if not args.skip_overhead:
        print_overhead(console, overhead(base, held))
    model, title, tag = workload(args, base, warmup if args.neurons_on == "warmup" else disjoint)
    scan_text = tok.decode([t for w in warmup for t in w])
    standby = all_modules(model) if args.standby_share is None else standby_within(model, scan_text, args.standby_share)
    rows = {
        k: effect_row(model, k, warmup, held, standby=standby) for k in ("all INT8", "INT8 + online fallback", "bf16")
    }
    if args.workload == "channel":  # how much of it the seeded modules carry; bf16 of the copy = the original's
        seeded = [f"model.layers.{i}.mlp.down_proj" for i in args.layers.split(",")]
        rows["INT8, only the seeded down_proj in bf16"] = effect_row(model, "seeded", warmup, held, seeded)
        rows["bf16, the original model"] = effect_row(base, "bf16 original", warmup, held)
    print_effect(console, rows, f"{title}, {len(held)}×{len(held[0])} held-out tokens after the warm-up")
    fallback = rows["INT8 + online fallback"]
    (WORK / f"fallback-{tag}.json").write_text(json.dumps({k: fallback[k] for k in ("history", "events")}))
    stem = "quant_monitor_rates" + ("_channel" if args.workload == "channel" else "") + ("_drift" if args.drift else "")
    stem += ("_disjoint" if args.neurons_on == "disjoint" else "") + (
        f"_standby{args.standby_share:g}".replace(".", "p") if args.standby_share is not None else ""
    )
    seeded = rows.get("INT8, only the seeded down_proj in bf16", {}).get("keep", ())
    plot(fallback["history"], fallback["events"], len(warmup), ROOT / "docs" / "img" / f"{stem}.png", seeded)
    print_switch(console, fallback["events"], select_cost())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=24, help="warm-up requests of 128 calibration tokens")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--workload", choices=("comma", "channel"), default="comma", help="which model copy")
    parser.add_argument("--boost", type=float, default=40.0, help="comma: the massive activation, × the row RMS")
    parser.add_argument("--layers", default="2,9,16", help="channel: the layers whose down_proj input gets one")
    parser.add_argument("--scale", type=float, default=256.0, help="channel: the neuron's factor (a power of two)")
    parser.add_argument(
        "--drift", action="store_true", help="warm up on text without ',' (traffic changes at the held-out text)"
    )
    parser.add_argument(
        "--neurons-on",
        choices=("warmup", "disjoint"),
        default="warmup",
        help="channel: pick the outlier neurons on the warm-up text, or on calibration text disjoint from it",
    )
    parser.add_argument(
        "--standby-share",
        type=float,
        default=None,
        help="standby copies within this share of the linear weights' bytes, ranked by a scan (default: every module)",
    )
    return parser.parse_args()


def workload(args: argparse.Namespace, base: Path, pick: list[list[int]]) -> tuple[Path, str, str]:
    """The model copy (its outlier neurons picked on ``pick``), its table title and its file tag."""
    from quant_monitor_models import channel_copy, comma_copy

    drift = ("-drift" if args.drift else "") + ("-disjoint" if args.neurons_on == "disjoint" else "")
    drift += f"-standby{args.standby_share:g}" if args.standby_share is not None else ""
    if args.workload == "comma":
        title = f"SmolLM2 with a massive activation on ',' (+{args.boost:g}× row RMS)"
        return comma_copy(base, WORK, args.boost), title, f"comma-{args.boost:g}{drift}"
    layers = [int(x) for x in args.layers.split(",")]
    title = f"SmolLM2 with an outlier channel (×{args.scale:g}) at down_proj's input in layers {args.layers}"
    return channel_copy(base, WORK, pick, layers, args.scale, args.neurons_on), title, f"channel{drift}"


def print_overhead(console: Console, best: dict[str, dict[str, float]]) -> None:
    table = Table(title="Monitor overhead, SmolLM2 W8A8 bf16 (best of 2 engines each, alternated)")
    for col in ("", "monitor off", "monitor on", "on / off"):
        table.add_column(col, justify="right")
    for key in best["off"]:
        off, on = best["off"][key], best["on"][key]
        table.add_row(f"{key} tok/s", f"{off:.1f}", f"{on:.1f}", f"{on / off:.3f}×")
    console.print(table)


def print_effect(console: Console, rows: dict[str, dict], title: str) -> None:
    table = Table(title=f"Fallback effect: {title}")
    for col in ("row", "perplexity", "gap to bf16 closed", "modules on high precision"):
        table.add_column(col, justify="right")
    int8, bf16 = rows["all INT8"]["ppl"], rows["bf16"]["ppl"]
    for name, r in rows.items():
        closed = (int8 - r["ppl"]) / (int8 - bf16) if int8 != bf16 else float("nan")
        fell = [e["module"] for e in r["events"] if e["kind"] == "fallback"]
        kinds = sorted({m.rpartition(".")[2] for m in fell + r["keep"]})
        held_high = f"{len(fell)} fell back" if fell else f"{len(r['keep'])} kept" if r["keep"] else ""
        table.add_row(name, f"{r['ppl']:.3f}", f"{closed:.0%}", f"{held_high} ({', '.join(kinds)})" if kinds else "-")
    console.print(table)
    seeded = next((r["keep"] for r in rows.values() if r["keep"]), [])
    steps = {e["module"]: e["step"] for e in rows["INT8 + online fallback"]["events"] if e["kind"] == "fallback"}
    for module in seeded:
        console.print(f"  seeded {module}: fell back at step {steps.get(module, 'never')}")


def print_switch(console: Console, events: list[dict], cost: dict[str, float]) -> None:
    table = Table(title="Switch latency and per-layer cost")
    table.add_column("measure")
    table.add_column("value", justify="right")
    lags = [e["serving_from_step"] - e["step"] for e in events if e["kind"] == "fallback"]
    table.add_row("steps from decision to high-precision serving", f"{min(lags, default=0)}–{max(lags, default=0)}")
    for name, us in cost.items():
        table.add_row(f"{name} (µs per layer per call)", f"{us:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()

"""The online outlier monitor (quant.monitor) on SmolLM2, W8A8: overhead, fallback effect, switch.

1. **Overhead.** W8A8 (bf16) with the monitor off and on (sigma 4, the default thresholds, no
   standby copies), as alternating engines (off, on, off, on; the best of each). It measures
   prefill tokens/s over held-out windows, and decode tokens/s at batch 1 and batch 8.
2. **Fallback effect.** It runs on a model copy with a *massive activation*. Real LLMs carry one on
   a few frequent tokens (BOS, ".", ",", "\\n"): a few fixed residual channels, orders of magnitude
   above the rest (Sun et al. 2024, "Massive Activations in Large Language Models",
   arXiv:2402.17762). SmolLM2-135M has only mild ones. The copy adds one: the "," token's input
   embedding gets +A in one channel, and lm_head is untied so the output side is unchanged.
   Three engines serve it: all INT8, INT8 + the online fallback (every module may fall back),
   and bf16. Each first serves a warm-up of calibration text, one request at a time, then the
   held-out windows, and reports their perplexity; the table lists the modules that fell back.
   With ``--drift`` the warm-up text has no ',': the traffic changes at the held-out text, which
   is the case the monitor is for.
3. **Switch.** Steps from the decision to the first high-precision forward (events), and the
   per-layer cost in ``apply``: the flag read and ``observe``.

Writes ``docs/img/quant_monitor_rates.png``: the outlier rate of the tripped modules per warm-up
request, with the fallback marked.

    .venv/bin/python bench/quant_monitor.py                                 # overhead + effect, boost 40
    .venv/bin/python bench/quant_monitor.py --skip-overhead --boost 300 --drift
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
WORK = Path("/tmp/structserve-bench-monitor")
COMMA_BOOST = 40.0  # × the embedding row's RMS, in one channel (--boost)
DEFAULT = {"sigma": 4.0, "rate_threshold": 0.01, "window_requests": 1000, "min_window_tokens": 256}


def spiked_copy(base: Path) -> Path:
    """The model copy with a massive activation on ',' (cached in WORK)."""
    import shutil

    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    out = WORK / f"smollm2-massive-{COMMA_BOOST:g}"
    if (out / "config.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in base.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy(f, out / f.name)
    tensors = load_file(str(base / "model.safetensors"))
    embed = tensors["model.embed_tokens.weight"]
    tensors["lm_head.weight"] = embed.clone()  # untied: the output side stays the original
    comma = AutoTokenizer.from_pretrained(str(base)).encode(",", add_special_tokens=False)[0]
    channel = int(embed.float().abs().mean(0).argmax())
    row = embed[comma].float()
    row[channel] += COMMA_BOOST * float(row.square().mean().sqrt())
    embed[comma] = row.to(embed.dtype)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=1))
    print(f"model copy: token {comma} (',') channel {channel} +{COMMA_BOOST}× its row RMS -> {out}")
    return out


def start_engine(model: Path, quantized: bool, monitor: dict | None, events: Path | None = None):
    """An in-process engine (bf16, torch_native attention); W8A8 when ``quantized``."""
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.quant.monitor import MonitorConfig
    from runtime_ext.quant.policy import QuantPolicy
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    config = None
    if monitor is not None:
        standby = all_modules(model) if monitor.pop("standby_all", False) else ()
        config = MonitorConfig(enabled=True, **monitor, events_path=str(events) if events else None, standby=standby)
    runtime = replace(RuntimeExtConfig.from_env(), quant_policy=QuantPolicy("w8a8_dynamic"), quant_monitor=config)
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


def effect_row(model: Path, kind: str, warmup: list[list[int]], held: list[list[int]]) -> dict:
    """Warm-up requests (rates recorded after each), then held-out perplexity."""
    events = WORK / f"events-{kind}.jsonl"
    events.unlink(missing_ok=True)
    monitor = {**DEFAULT, "standby_all": True} if kind == "INT8 + online fallback" else None
    engine = start_engine(model, kind != "bf16", monitor, events)
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
    return {"ppl": ppl, "history": history, "report": report, "events": [json.loads(line) for line in lines]}


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


def plot(history: list[dict[str, float]], events: list[dict], warmup: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tripped = sorted({e["module"] for e in events if e["kind"] == "fallback"})
    switched = {e["module"]: e["step"] - 1 for e in events if e["kind"] == "fallback"}  # one step per request
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in tripped[:12]:
        rates = [100 * h.get(name, 0.0) for h in history]
        (line,) = ax.plot(rates, label=name.replace("model.layers.", "L"), lw=1)
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=24, help="warm-up requests of 128 calibration tokens")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--boost", type=float, default=COMMA_BOOST, help="the massive activation, × the row RMS")
    parser.add_argument(
        "--drift", action="store_true", help="warm up on text without ',' (traffic changes at the held-out text)"
    )
    args = parser.parse_args()
    globals()["COMMA_BOOST"] = args.boost
    from transformers import AutoTokenizer

    from assets import calibration_text, eval_text, fetch

    WORK.mkdir(parents=True, exist_ok=True)
    base = fetch(["smollm2", "austen"]).smollm2
    tok = AutoTokenizer.from_pretrained(str(base))
    held_ids = tok.encode(eval_text()[: args.windows * args.window * 8], add_special_tokens=False)
    held = [held_ids[i * args.window : (i + 1) * args.window] for i in range(args.windows)]
    warm_text = calibration_text()[: args.warmup * 128 * 8]
    calib = tok.encode(warm_text.replace(",", "") if args.drift else warm_text, add_special_tokens=False)
    warmup = [calib[i * 128 : (i + 1) * 128] for i in range(args.warmup)]
    console = Console(width=160)
    if not args.skip_overhead:
        print_overhead(console, overhead(base, held))
    model = spiked_copy(base)
    rows = {k: effect_row(model, k, warmup, held) for k in ("all INT8", "INT8 + online fallback", "bf16")}
    print_effect(console, rows, held)
    fallback = rows["INT8 + online fallback"]
    (WORK / f"fallback-{COMMA_BOOST:g}{'-drift' if args.drift else ''}.json").write_text(
        json.dumps({k: fallback[k] for k in ("history", "events")})
    )
    name = "quant_monitor_rates_drift.png" if args.drift else "quant_monitor_rates.png"
    plot(fallback["history"], fallback["events"], len(warmup), ROOT / "docs" / "img" / name)
    print_switch(console, fallback["events"], select_cost())


def print_overhead(console: Console, best: dict[str, dict[str, float]]) -> None:
    table = Table(title="Monitor overhead, SmolLM2 W8A8 bf16 (best of 2 engines each, alternated)")
    for col in ("", "monitor off", "monitor on", "on / off"):
        table.add_column(col, justify="right")
    for key in best["off"]:
        off, on = best["off"][key], best["on"][key]
        table.add_row(f"{key} tok/s", f"{off:.1f}", f"{on:.1f}", f"{on / off:.3f}×")
    console.print(table)


def print_effect(console: Console, rows: dict[str, dict], held: list[list[int]]) -> None:
    table = Table(
        title=f"Fallback effect: SmolLM2 with a massive activation on ',' (+{COMMA_BOOST:g}× row RMS), "
        f"{len(held)}×{len(held[0])} held-out tokens after the warm-up"
    )
    for col in ("row", "perplexity", "gap to bf16 closed", "modules on high precision"):
        table.add_column(col, justify="right")
    int8, bf16 = rows["all INT8"]["ppl"], rows["bf16"]["ppl"]
    for name, r in rows.items():
        closed = (int8 - r["ppl"]) / (int8 - bf16) if int8 != bf16 else float("nan")
        fell = [e["module"] for e in r["events"] if e["kind"] == "fallback"]
        kinds = sorted({m.rpartition(".")[2] for m in fell})
        table.add_row(name, f"{r['ppl']:.3f}", f"{closed:.0%}", f"{len(fell)} ({', '.join(kinds)})" if fell else "-")
    console.print(table)


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

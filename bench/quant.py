"""Quantized linear layers vs bf16 on SmolLM2: weight memory, perplexity, prefill/decode speed.

Pipeline (what a deployment would do): ``quant calibrate`` (SmoothQuant, α searched on the
calibration split) writes a smoothed checkpoint; ``quant scan`` on it writes the fallback
list (whole fused modules); ``quant export --sensitive-layers`` of that list writes the
msModelSlim-layout checkpoint the "exported" row serves (``structserve_modelslim``). Then, for
each row, an in-process ``sglang.Engine`` (bf16, torch_native attention):

- linear-weight bytes as stored (int8/int4 values + scales [+ the decode copy]) over the
  same weights in bf16, counted in the scheduler (plugin report);
- perplexity on held-out text (*Persuasion*, never used for calibration): windows prefilled
  with ``logprob_start_len=0``;
- prefill tokens/s: those windows, one at a time (no prefix-cache hits: distinct texts);
- decode tokens/s: a batch of 8, 64 new tokens each, ignore_eos; best of 3.

    .venv/bin/python bench/quant.py
    .venv/bin/python bench/quant.py --rows bf16 "W8A8 + SQ + fallback, exported"   # some rows only
    .venv/bin/python bench/quant.py --only-w4 --w4-rows "W4A16 g128 GPTQ asym + act-order + clip"
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORK = Path("/tmp/structserve-bench-quant")

# row: (model: "base" | "smoothed" | "exported", scheme or None ("modelslim": as described), policy, fallback list?)
ROWS = {
    "bf16": ("base", None, {}, False),
    "W8A8": ("base", "w8a8_dynamic", {}, False),
    "W8A8 + SmoothQuant": ("smoothed", "w8a8_dynamic", {}, False),
    "W8A8 + SmoothQuant + fallback": ("smoothed", "w8a8_dynamic", {}, True),
    "W8A8 + SQ + fallback, stage-aware": ("smoothed", "w8a8_dynamic", {"stage_aware": True}, True),
    "W8A8 + SQ + fallback, exported": ("exported", "modelslim", {}, False),
    "W8A16 g128": ("base", "w8a16", {}, False),
    "W4A16 g128": ("base", "w4a16", {}, False),
}


def prepare(base: Path, kl_top: float) -> tuple[Path, Path, list[str]]:
    """The smoothed checkpoint, the export with its fallback list (``quant scan --kl-top``) and the
    list (cached in WORK)."""
    from typer.testing import CliRunner

    from runtime_ext.quant.sensitivity import load_sensitive_layers
    from tools.cli import app

    smoothed, scan = WORK / "smoothed", WORK / f"sensitive_layers_kl{kl_top}.json"
    exported = WORK / f"exported_kl{kl_top}"
    if not (smoothed / "config.json").is_file():
        result = CliRunner().invoke(app, ["quant", "calibrate", "--model", str(base), "--out", str(smoothed)])
        assert result.exit_code == 0, result.output
        print(result.output)
    if not scan.is_file():
        args = ["quant", "scan", "--model", str(smoothed), "--kl-top", str(kl_top), "--out", str(scan)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    if not (exported / "config.json").is_file():
        args = ["--model", str(smoothed), "--scheme", "w8a8_dynamic", "--sensitive-layers", str(scan)]
        result = CliRunner().invoke(app, ["quant", "export", *args, "--out", str(exported)])
        assert result.exit_code == 0, result.output
    return smoothed, exported, load_sensitive_layers(scan)


def run_row(model: Path, scheme: str | None, policy: dict, windows: list[list[int]]) -> dict:
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.plugin import INTERNAL_STATE_KEY
    from runtime_ext.quant.policy import QuantPolicy
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    quant = QuantPolicy.from_json(  # (a modelslim checkpoint describes itself: any valid scheme)
        json.dumps(
            {
                "scheme": scheme if scheme in ("w8a16", "w4a16", "w8a8_dynamic") else "w8a8_dynamic",
                "group_size": 128,
                "stage_aware": False,
                "keep": [],
                **policy,
            }
        )
    )
    replace(RuntimeExtConfig.from_env(), quant_policy=quant).export()
    options = EngineOptions(
        model_path=model,
        dtype="bfloat16",
        engine=EngineSettings(max_total_tokens=16384),
        quantization=f"structserve_{scheme}" if scheme else None,
    )
    engine = sglang.Engine(**options.engine_kwargs())
    try:
        logprobs, start = [], time.perf_counter()
        for ids in tqdm(windows, desc=f"{scheme or 'bf16'} perplexity"):
            out = engine.generate(
                input_ids=[ids],
                sampling_params={"max_new_tokens": 1, "temperature": 0},
                return_logprob=True,
                logprob_start_len=0,
            )[0]
            logprobs += [lp[0] for lp in out["meta_info"]["input_token_logprobs"] if lp[0] is not None]
        prefill = sum(len(w) for w in windows) / (time.perf_counter() - start)
        params = {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}
        engine.generate(input_ids=[windows[0][:32]], sampling_params={**params, "max_new_tokens": 4})
        decode = max(decode_speed(engine, windows, params) for _ in range(3))
        stats = engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]["quant"]
        return {"logprobs": logprobs, "prefill": prefill, "decode": decode, "stats": stats}
    finally:
        engine.shutdown()


def decode_speed(engine, windows: list[list[int]], params: dict) -> float:
    start = time.perf_counter()
    outs = engine.generate(input_ids=[w[:64] for w in windows[:8]], sampling_params=params)
    return sum(o["meta_info"]["completion_tokens"] for o in outs) / (time.perf_counter() - start)


def held_out(model: Path, n: int, size: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from assets import eval_text

    ids = AutoTokenizer.from_pretrained(str(model)).encode(eval_text()[: n * size * 8], add_special_tokens=False)
    return [ids[i * size : (i + 1) * size] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="rows to run (bf16 always)")
    parser.add_argument("--only-w4", action="store_true", help="bf16 and the W4A16 calibration rows only")
    parser.add_argument("--calib-tokens", type=int, default=8192, help="AWQ/GPTQ calibration tokens")
    parser.add_argument("--kl-top", type=float, default=0.05, help="the W8A8 scan's --kl-top (fallback size)")
    parser.add_argument("--w4-kl-top", type=float, default=0.05, help="the W4A16 scan's --kl-top (fallback rows)")
    w4_help = "W4 rows to run (none given: no W4 rows)"
    parser.add_argument("--w4-rows", nargs="*", choices=list(W4_RECIPES), default=list(W4_RECIPES), help=w4_help)
    args = parser.parse_args()
    from assets import fetch

    base = fetch(["smollm2", "austen"]).smollm2
    windows = held_out(base, args.windows, args.window)
    results, fallback = {}, []
    if not args.only_w4:
        smoothed, exported, fallback = prepare(base, args.kl_top)
        models = {"base": base, "smoothed": smoothed, "exported": exported}
        for name, (which, scheme, policy, use_fallback) in ROWS.items():
            if name != "bf16" and name not in args.rows:
                continue
            policy = {**policy, "keep": fallback} if use_fallback else policy
            results[name] = run_row(models[which], scheme, policy, windows)
    else:
        results["bf16"] = run_row(base, None, {}, windows)
    w4 = prepare_w4(base, args.calib_tokens, args.w4_rows, args.w4_kl_top)
    for name, (model, scheme, keep, _) in w4.items():
        results[name] = run_row(model, scheme, {"keep": keep}, windows)
    print_table(base, args, results, len(fallback))
    if w4:
        print_w4_table(results, w4, args.calib_tokens)


def print_table(model: Path, args: argparse.Namespace, results: dict, kept: int) -> None:
    ref = results["bf16"]
    ppl0 = math.exp(-sum(ref["logprobs"]) / len(ref["logprobs"]))
    table = Table(
        title=f"Quantized linear layers vs bf16: {model.name}, {args.windows}×{args.window} tokens of "
        f"Persuasion (fallback keeps {kept} of 210 linear layers)"
    )
    for col in (
        "weights",
        "linear bytes vs bf16",
        "perplexity",
        "Δ ppl",
        "prefill tok/s",
        "vs bf16",
        "decode tok/s (bs 8)",
        "vs bf16",
    ):
        table.add_column(col, justify="right")
    for name, r in results.items():
        ppl = math.exp(-sum(r["logprobs"]) / len(r["logprobs"]))
        stats = r["stats"]
        ratio = stats["weight_bytes"] / stats["weight_bytes_unquantized"] if stats["weight_bytes_unquantized"] else 1
        table.add_row(
            name,
            f"{ratio:.3f}×",
            f"{ppl:.3f}",
            f"{(ppl / ppl0 - 1) * 100:+.2f}%",
            f"{r['prefill']:.0f}",
            f"{r['prefill'] / ref['prefill']:.2f}×",
            f"{r['decode']:.1f}",
            f"{r['decode'] / ref['decode']:.2f}×",
        )
    Console(width=200).print(table)


# W4A16 g128: round-to-nearest, AWQ, GPTQ (tools/quant/{awq,gptq}.py), each
# calibrated on the Austen split; the fallback keeps the layers of a W4A16 scan in bf16.
# name -> (calibrate options, start from the AWQ checkpoint?, served online (RTN) or as the GPTQ export)
ASYM = ("--method", "gptq", "--act-order", "--asym")
W4_RECIPES = {
    "W4A16 g128 RTN": (None, False),
    "W4A16 g128 AWQ": (("--method", "awq"), False),
    "W4A16 g128 GPTQ": (("--method", "gptq", "--no-clip"), False),
    "W4A16 g128 GPTQ + act-order": (("--method", "gptq", "--act-order", "--no-clip"), False),
    "W4A16 g128 GPTQ + act-order + clip": (("--method", "gptq", "--act-order"), False),
    "W4A16 g128 AWQ → GPTQ + act-order + clip": (("--method", "gptq", "--act-order"), True),
    "W4A16 g128 AWQ → GPTQ + act-order + clip + fallback": (("--method", "gptq", "--act-order"), True),
    "W4A16 g128 GPTQ + act-order + clip + fallback": (("--method", "gptq", "--act-order"), False),
    "W4A16 g128 GPTQ asym + act-order + clip": (ASYM, False),
    "W4A16 g128 GPTQ asym + act-order + clip + fallback": (ASYM, False),
    "W4A16 g64 GPTQ asym + act-order + clip": ((*ASYM, "--group-size", 64), False),
}


def prepare_w4(
    base: Path, tokens: int, names: list[str], kl_top: float = 0.05
) -> dict[str, tuple[Path, str, list[str], float]]:
    """Per W4 row in ``names``: (checkpoint, engine scheme, kept layers, calibration seconds); cached in
    WORK/w4 per row name, token count and (fallback rows) the W4 scan's ``--kl-top``."""
    from typer.testing import CliRunner

    from runtime_ext.quant.sensitivity import load_sensitive_layers
    from tools.cli import app

    def invoke(*cmd: object) -> float:
        start = time.perf_counter()
        result = CliRunner().invoke(app, [str(c) for c in cmd])
        assert result.exit_code == 0, result.output
        print(result.output.splitlines()[-1])
        return time.perf_counter() - start

    def calibrate(name: str, model: Path, options: tuple, *extra: object) -> tuple[Path, float]:
        out = WORK / "w4" / f"{tokens}" / "".join(c if c.isalnum() else "_" for c in name)
        if not (out / "seconds").is_file():
            seconds = invoke("quant", "calibrate", "--model", model, "--out", out, "--tokens", tokens, *options, *extra)
            (out / "seconds").write_text(f"{seconds:.1f}")
        return out, float((out / "seconds").read_text())

    scan = WORK / "w4" / f"sensitive_layers_w4a16_kl{kl_top}.json"
    if not scan.is_file() and any(n.endswith("fallback") for n in names):
        invoke("quant", "scan", "--model", base, "--scheme", "w4a16", "--kl-top", kl_top, "--out", scan)
    awq = functools.cache(lambda: calibrate("awq", base, ("--method", "awq")))  # only if a row needs it
    rows = {}
    for name, (options, on_awq) in W4_RECIPES.items():
        if name not in names:
            continue
        if options is None:
            rows[name] = (base, "w4a16", [], 0.0)
        elif options[1] == "awq":
            rows[name] = (awq()[0], "w4a16", [], awq()[1])
        else:
            extra = ("--sensitive-layers", scan) if name.endswith("fallback") else ()
            key = f"{name} kl{kl_top}" if extra else name
            out, seconds = calibrate(key, awq()[0] if on_awq else base, options, *extra)
            rows[name] = (out, "modelslim", [], seconds + (awq()[1] if on_awq else 0.0))
    if scan.is_file():
        print(f"W4A16 fallback list: {len(load_sensitive_layers(scan))} layers")
    return rows


def print_w4_table(results: dict, w4: dict, tokens: int) -> None:
    ppl0 = math.exp(-sum(results["bf16"]["logprobs"]) / len(results["bf16"]["logprobs"]))
    table = Table(title=f"W4A16 g128 calibration ({tokens} calibration tokens; held-out perplexity via the engine)")
    for col in ("weights", "stored as", "linear bytes vs bf16", "perplexity", "Δ ppl", "calibration s"):
        table.add_column(col, justify="right")
    for name, (model, scheme, _, seconds) in w4.items():
        r = results[name]
        ppl = math.exp(-sum(r["logprobs"]) / len(r["logprobs"]))
        stats = r["stats"]
        ratio = stats["weight_bytes"] / stats["weight_bytes_unquantized"] if stats["weight_bytes_unquantized"] else 1
        stored = "export" if scheme == "modelslim" else "online RTN"
        table.add_row(name, stored, f"{ratio:.3f}×", f"{ppl:.3f}", f"{(ppl / ppl0 - 1) * 100:+.2f}%", f"{seconds:.0f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""C8 KV cache vs the unquantized (bf16) cache on SmolLM2: memory, accuracy, speed.

For each KV mode, an in-process ``sglang.Engine`` (bf16 model, torch_native attention):
- bytes/token as allocated: the pool's buffers (SGLang's ``get_kv_size_bytes`` plus our
  residual side buffers) divided by its token count, read from the scheduler through the
  plugin report; tokens per 1 GiB of KV;
- perplexity on held-out text (*Persuasion*): windows of ``--window`` tokens, prefilled
  with ``logprob_start_len=0`` in chunks of ``--chunk`` tokens (``chunked_prefill_size``).
  Every position attends to keys/values read back from the (quantized) pool:
  the attention backend (runtime_ext.attention.native) first stores the chunk
  (``set_kv_buffer``, which quantizes), then gathers this request's rows from the pool and
  dequantizes them (``method.gather``), so every scored position attends to quantized
  K/V, including the chunk's own tokens. Per-token |Δ logprob| vs bf16.
- the outlier rate C8-S+residual saw while serving (plugin report);
- decode throughput: a batch of 8, 64 new tokens each, ignore_eos; best of 3 rounds. The row marked
  "SGLang read" is C8-D with SGLang's own torch_native backend (whole-layer dequantize
  on every read), for the read-path comparison.

    .venv/bin/python bench/kv_c8.py
    .venv/bin/python bench/kv_c8.py --dtype float32   # quantization error alone (no bf16 noise)
"""

from __future__ import annotations

import argparse
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

MODES = ("bf16", "c8_dynamic", "c8_dynamic/SGLang read", "c8_static", "c8_static_residual")
GIB = 1 << 30


def windows(n: int, size: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from assets import eval_text, fetch

    assets = fetch(["smollm2", "austen"])
    tok = AutoTokenizer.from_pretrained(str(assets.smollm2))
    ids = tok.encode(eval_text()[: n * size * 8], add_special_tokens=False)
    return [ids[i * size : (i + 1) * size] for i in range(n)]


def decode_speed(engine, prompts: list[list[int]], params: dict) -> float:
    start = time.perf_counter()
    outs = engine.generate(input_ids=[p[:64] for p in prompts[:1]] * 8, sampling_params=params)
    return sum(o["meta_info"]["completion_tokens"] for o in outs) / (time.perf_counter() - start)


def calibrate_once(model: Path) -> None:
    """C8-S scales from the calibration split (never the held-out text)."""
    from assets import calibration_text
    from runtime_ext.config import RuntimeExtConfig
    from tools.kv_calibrate import calibrate

    path = Path("/tmp/structserve-bench-kv-calibration.json")
    calib = calibrate(model, calibration_text(), tokens=2048)
    calib.save(path)
    replace(RuntimeExtConfig.from_env(), kv_calibration=path).export()
    print(f"calibration: ε mean {calib.eps_mean:.4f}, τ {calib.tau:.4f}, outlier rate {calib.outlier_rate:.2%}")


def run_mode(model: Path, mode: str, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.plugin import INTERNAL_STATE_KEY
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    kv_cache, _, read = mode.partition("/")
    # read by the scheduler's plugin
    replace(RuntimeExtConfig.from_env(), attention="sglang" if read else "structserve").export()
    options = EngineOptions(
        model_path=model, dtype=args.dtype, engine=EngineSettings(max_total_tokens=16384), kv_cache=kv_cache
    )
    engine = sglang.Engine(**options.engine_kwargs(), chunked_prefill_size=args.chunk)
    try:
        logprobs = []
        for ids in tqdm(prompts, desc=f"{mode} perplexity"):
            out = engine.generate(
                input_ids=[ids],
                sampling_params={"max_new_tokens": 1, "temperature": 0},
                return_logprob=True,
                logprob_start_len=0,
            )[0]
            logprobs.append([lp[0] for lp in out["meta_info"]["input_token_logprobs"] if lp[0] is not None])
        params = {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}
        engine.generate(input_ids=[prompts[0][:32]], sampling_params={**params, "max_new_tokens": 4})
        tok_s = max(decode_speed(engine, prompts, params) for _ in range(3))
        report = engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]
        return {"logprobs": logprobs, "tok_s": tok_s, "pool": report["kv_pool"], "stats": report["kv_cache_stats"]}
    finally:
        engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args()
    from assets import fetch

    model = fetch(["smollm2"]).smollm2
    prompts = windows(args.windows, args.window)
    calibrate_once(model)
    results = {mode: run_mode(model, mode, prompts, args) for mode in MODES}
    print_table(model, args, results)


def bytes_per_token(result: dict) -> float:
    return result["pool"]["bytes"] / result["pool"]["tokens"]


def print_table(model: Path, args: argparse.Namespace, results: dict) -> None:
    ref = [lp for window in results["bf16"]["logprobs"] for lp in window]
    table = Table(
        title=f"C8 KV vs unquantized KV: {model.name} in {args.dtype}, {args.windows}×{args.window} "
        f"tokens of Persuasion, prefill chunks of {args.chunk}"
    )
    for col in (
        "KV",
        "bytes/token",
        "vs bf16",
        "tokens per GiB",
        "perplexity",
        "Δ ppl",
        "mean |Δ logprob|",
        "max |Δ logprob|",
        "outlier rate",
        "decode tok/s (bs 8)",
        "speed vs bf16",
    ):
        table.add_column(col, justify="right")
    base_ppl = math.exp(-sum(ref) / len(ref))
    for mode in MODES:
        lps = [lp for window in results[mode]["logprobs"] for lp in window]
        ppl = math.exp(-sum(lps) / len(lps))
        deltas = [abs(a - b) for a, b in zip(lps, ref)]
        size, stats = bytes_per_token(results[mode]), results[mode]["stats"]
        rate = f"{stats['outlier_rate']:.2%} ({stats['dropped']} dropped)" if "outlier_rate" in stats else "-"
        table.add_row(
            mode,
            f"{size:.0f}",
            f"{size / bytes_per_token(results['bf16']):.3f}×",
            f"{GIB / size:,.0f}",
            f"{ppl:.3f}",
            f"{(ppl / base_ppl - 1) * 100:+.2f}%",
            f"{sum(deltas) / len(deltas):.4f}",
            f"{max(deltas):.4f}",
            rate,
            f"{results[mode]['tok_s']:.1f}",
            f"{results[mode]['tok_s'] / results['bf16']['tok_s']:.2f}×",
        )
    Console(width=200).print(table)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""C8 KV cache vs the unquantized (bf16) cache on SmolLM2: memory, accuracy, speed.

For each KV mode, an in-process ``sglang.Engine`` (bf16 model, torch_native attention):
- bytes/token from what each method stores (``compute_cell_size`` of the method vs
  ``2 * layers * kv_heads * head_dim * 2`` for bf16), and tokens per 1 GiB of KV;
- perplexity on held-out text (*Persuasion*): windows of ``--window`` tokens, prefilled
  with ``logprob_start_len=0`` in chunks of ``--chunk`` tokens (``chunked_prefill_size``).
  Every position attends to keys/values read back from the (quantized) pool:
  torch_native's extend path first stores the chunk (``set_kv_buffer``), then runs SDPA
  over ``get_key_buffer``/``get_value_buffer``, which for C8 return the dequantized INT8
  values (sglang 0.5.23 ``torch_native_backend.forward_extend``). Per-token |Δ logprob|
  vs bf16.
- decode throughput: a batch of 8, 64 new tokens each, ignore_eos.

    .venv/bin/python bench/kv_c8.py
    .venv/bin/python bench/kv_c8.py --windows 4 --window 512
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODES = ("bf16", "c8_dynamic", "c8_static")
GIB = 1 << 30


def windows(n: int, size: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from service.assets import eval_text, fetch

    assets = fetch(["smollm2", "austen"])
    tok = AutoTokenizer.from_pretrained(str(assets.smollm2))
    ids = tok.encode(eval_text()[: n * size * 8], add_special_tokens=False)
    return [ids[i * size:(i + 1) * size] for i in range(n)]


def run_mode(model: Path, mode: str, prompts: list[list[int]], chunk: int) -> dict:
    from service.engine import EngineOptions, prepare_process_env

    if mode == "c8_static":  # scales from the calibration split (never the held-out text)
        from runtime_ext.kv_cache.calibration import calibrate
        from service.assets import calibration_text

        path = Path("/tmp/structserve-bench-kv-calibration.json")
        calib = calibrate(model, calibration_text(), tokens=2048)
        calib.save(path)
        os.environ["STRUCTSERVE_KV_CALIBRATION"] = str(path)
        print(f"calibration: ε mean {calib.eps_mean:.4f}, τ {calib.tau:.4f}, outlier rate {calib.outlier_rate:.2%}")

    prepare_process_env("cpu")
    import sglang

    options = EngineOptions(model_path=model, dtype="bfloat16", max_total_tokens=16384, page_size=16, kv_cache=mode)
    engine = sglang.Engine(**options.engine_kwargs(), chunked_prefill_size=chunk)
    try:
        logprobs = []
        for ids in tqdm(prompts, desc=f"{mode} perplexity"):
            out = engine.generate(input_ids=[ids], sampling_params={"max_new_tokens": 1, "temperature": 0},
                                  return_logprob=True, logprob_start_len=0)[0]
            logprobs.append([lp[0] for lp in out["meta_info"]["input_token_logprobs"] if lp[0] is not None])
        params = {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}
        engine.generate(input_ids=[prompts[0][:32]], sampling_params={**params, "max_new_tokens": 4})
        start = time.perf_counter()
        outs = engine.generate(input_ids=[p[:64] for p in prompts[:1]] * 8, sampling_params=params)
        tok_s = sum(o["meta_info"]["completion_tokens"] for o in outs) / (time.perf_counter() - start)
        return {"logprobs": logprobs, "tok_s": tok_s}
    finally:
        engine.shutdown()


def bytes_per_token(model: Path, mode: str) -> int:
    import json

    cfg = json.loads((model / "config.json").read_text())
    layers, heads = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if mode == "bf16":
        return layers * heads * dim * 2 * 2
    from runtime_ext.kv_cache.sglang_method import c8_cell_size

    return c8_cell_size(heads, dim, layers) if mode == "c8_dynamic" else layers * heads * dim * 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--chunk", type=int, default=64)
    args = parser.parse_args()
    from service.assets import fetch

    model = fetch(["smollm2"]).smollm2
    prompts = windows(args.windows, args.window)
    results = {mode: run_mode(model, mode, prompts, args.chunk) for mode in MODES}
    ref = [lp for window in results["bf16"]["logprobs"] for lp in window]
    table = Table(title=f"C8 KV vs bf16 KV: {model.name}, {args.windows}×{args.window} tokens of Persuasion, "
                        f"prefill chunks of {args.chunk}")
    for col in ("KV", "bytes/token", "vs bf16", "tokens per GiB", "perplexity", "Δ ppl",
                "mean |Δ logprob|", "max |Δ logprob|", "decode tok/s (bs 8)", "speed vs bf16"):
        table.add_column(col, justify="right")
    base_ppl = math.exp(-sum(ref) / len(ref))
    for mode in MODES:
        lps = [lp for window in results[mode]["logprobs"] for lp in window]
        ppl = math.exp(-sum(lps) / len(lps))
        deltas = [abs(a - b) for a, b in zip(lps, ref)]
        size = bytes_per_token(model, mode)
        table.add_row(mode, str(size), f"{size / bytes_per_token(model, 'bf16'):.3f}×", f"{GIB // size:,}",
                      f"{ppl:.3f}", f"{(ppl / base_ppl - 1) * 100:+.2f}%", f"{sum(deltas) / len(deltas):.4f}",
                      f"{max(deltas):.4f}", f"{results[mode]['tok_s']:.1f}",
                      f"{results[mode]['tok_s'] / results['bf16']['tok_s']:.2f}×")
    Console(width=200).print(table)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

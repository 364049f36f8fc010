"""KV-cache fidelity where users see it: every KV mode against the unquantized (bf16) cache.

For each model and each KV mode, an in-process ``sglang.Engine`` (torch_native attention through
runtime_ext's backend, prefix cache off, greedy) measures:

- **short-prompt exact match**: the greedy answers (chat template, ≤ ``--short-tokens`` tokens) to
  the short factual/instruction prompts of ``kv_fidelity_data.short_prompts`` compared whole with the
  bf16 cache's answers; and the answer to "What is the capital of France?";
- **teacher-forced agreement and KL**: the bf16 cache's own greedy answers (≤ ``--answer-tokens``)
  to ``--instructions`` chat instructions over held-out Austen sentences
  (``kv_fidelity_data.instructions``) are prefilled as prompt + answer; at every answer position the
  mode's top-1 token is compared with the bf16 cache's, and KL(bf16 ‖ mode) is computed over the
  bf16 cache's top-``--top`` tokens plus one bucket for the rest of the vocabulary (a coarsening:
  never above the full KL);
- **perplexity** on ``--windows`` × 512 tokens of *Persuasion* (prefill chunks of 64, so every
  position reads the quantized pool);
- bytes per token as allocated and decode tok/s at batch 8 (best of 3).

Modes are ``kv_cache[+rot ROTATION]`` (``kv_rotation``); static modes are calibrated on the
calibration split in the same rotation. ``bf16/one at a time`` is the noise floor: the same
unquantized cache with every request served alone (batch size 1 instead of the batch), so the
kernels see other shapes; a bf16 model's near-ties flip on that alone. A PNG of agreement per
answer position is written beside the table (``--png``).

    .venv/bin/python bench/kv_fidelity.py                        # SmolLM2 + tiny Qwen3, bf16 model
    .venv/bin/python bench/kv_fidelity.py --dtype float32 --models smollm2

Decode speed alone, the modes interleaved (less noise): ``bench/kv_fidelity_speed.py``.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "bench"))

from kv_fidelity_data import instructions, score, short_prompts  # noqa: E402

MODES = (
    "bf16",
    "bf16/one at a time",
    "c8_dynamic+rot none",
    "c8_dynamic+rot k",
    "c8_dynamic+rot kv",
    "c8_static+rot none",
    "c8_static+rot kv",
    "c8_static_residual+rot none",
    "c8_static_residual+rot kv",
)


def chat_ids(tok, prompts: list[str]) -> list[list[int]]:
    out = []
    for p in prompts:
        text = tok.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        out.append(tok.encode(text, add_special_tokens=False))
    return out


def calibration(model: Path, rotation: str) -> Path:
    from assets import calibration_text
    from tools.kv_calibrate import calibrate

    path = Path(f"/tmp/structserve-bench-kv-{model.name}-{rotation}.json")
    calibrate(model, calibration_text(), tokens=2048, rotation=rotation).save(path)
    return path


def start(model: Path, mode: str, dtype: str, calib: Path | None):
    from runtime_ext.config import RuntimeExtConfig
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    kv_cache, _, rotation = mode.split("/")[0].partition("+rot ")
    replace(RuntimeExtConfig.from_env(), kv_calibration=calib, kv_rotation=rotation or "none").export()
    options = EngineOptions(
        model_path=model,
        dtype=dtype,
        engine=EngineSettings(max_total_tokens=32768),
        kv_cache=kv_cache,
        prefix_cache="off",
    )
    return sglang.Engine(**options.engine_kwargs(), chunked_prefill_size=64)


def greedy(engine, prompts: list[list[int]], n: int) -> list[list[int]]:
    outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": n, "temperature": 0})
    return [o["output_ids"] for o in outs]


def forced(engine, prompts, answers, top: int, ids_per_request=None) -> list[list[dict[int, float]]]:
    """Per request, per answer position: {token id: logprob} (the top ``top``, plus ``ids_per_request``)."""
    outs = engine.generate(
        input_ids=[p + a for p, a in zip(prompts, answers)],
        sampling_params={"max_new_tokens": 1, "temperature": 0},
        return_logprob=True,
        logprob_start_len=[len(p) - 1 for p in prompts],  # entry 0 (the prompt's last token) is None
        top_logprobs_num=top,
        token_ids_logprob=ids_per_request,
    )
    result = []
    for o, a in zip(outs, answers):
        meta = o["meta_info"]
        rows = []
        for j in range(1, len(a) + 1):
            row = {tid: lp for lp, tid, *_ in meta["input_top_logprobs"][j]}
            if ids_per_request is not None:
                row.update({tid: lp for lp, tid, *_ in meta["input_token_ids_logprobs"][j]})
            rows.append(row)
        result.append(rows)
    return result


def perplexity_logprobs(engine, windows: list[list[int]]) -> list[float]:
    lps: list[float] = []
    for ids in windows:
        out = engine.generate(
            input_ids=[ids], sampling_params={"max_new_tokens": 1}, return_logprob=True, logprob_start_len=0
        )[0]
        lps += [lp[0] for lp in out["meta_info"]["input_token_logprobs"] if lp[0] is not None]
    return lps


def decode_speed(engine, prompt: list[int]) -> float:
    params = {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=[prompt[:64]] * 8, sampling_params=params)
        best = max(best, sum(o["meta_info"]["completion_tokens"] for o in outs) / (time.perf_counter() - t0))
    return best


class OneAtATime:
    """An engine whose ``generate`` serves a batch one request at a time (batch size 1 throughout)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def generate(self, input_ids, **kwargs):
        outs = []
        for i, ids in enumerate(input_ids):
            one = {k: [v[i]] if isinstance(v, list) and len(v) == len(input_ids) else v for k, v in kwargs.items()}
            outs += self.engine.generate(input_ids=[ids], **one)
        return outs

    def __getattr__(self, name: str):
        return getattr(self.engine, name)


def run_mode(model: Path, mode: str, args: argparse.Namespace, data: dict, ref: dict | None) -> dict:
    """Everything measured for one mode (``ref`` is the bf16 cache's result; None for bf16 itself)."""
    from runtime_ext.plugin import INTERNAL_STATE_KEY

    rotation = mode.partition("+rot ")[2]
    calib = data["calib"].get(rotation) if "static" in mode else None
    raw = start(model, mode, args.dtype, calib)
    # the floor: the same bf16 cache, served with other batch shapes
    engine = OneAtATime(raw) if mode.endswith("/one at a time") else raw
    try:
        short = greedy(engine, data["short"], args.short_tokens)
        if ref is None:  # the bf16 cache answers the instructions; every mode is scored on these answers
            answers = greedy(engine, data["instructions"], args.answer_tokens)
            rows = forced(engine, data["instructions"], answers, args.top)
        else:
            answers = ref["answers"]
            ids = [sorted({t for row in req for t in row}) for req in ref["rows"]]
            rows = forced(engine, data["instructions"], answers, 1, ids)
        lps = perplexity_logprobs(engine, data["windows"])
        tok_s = decode_speed(raw, data["windows"][0])
        report = raw.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]
    finally:
        raw.shutdown()
    pool = report["kv_pool"]
    return {
        "short": short,
        "answers": answers,
        "rows": rows,
        "lps": lps,
        "tok_s": tok_s,
        "bytes": pool["bytes"] / pool["tokens"],
    }


def print_table(model: str, args: argparse.Namespace, results: dict, tok) -> None:
    ref = results["bf16"]
    n_pos = sum(len(a) for a in ref["answers"])
    table = Table(
        title=f"KV fidelity vs the bf16 cache: {model} in {args.dtype}; {len(ref['short'])} short prompts, "
        f"{len(ref['answers'])} instructions ({n_pos} answer positions), {args.windows}×512 tokens of Persuasion"
    )
    cols = ("KV", "bytes/token", "short exact match", "capital of France", "teacher-forced top-1", "mean KL")
    for col in (*cols, "perplexity", "Δ ppl", "decode tok/s (bs 8)", "speed vs bf16"):
        table.add_column(col, justify="right")
    for mode, res in results.items():
        s = score(ref, res, args.top)
        answer = tok.decode(res["short"][0], skip_special_tokens=True).strip().replace("\n", " ")
        table.add_row(
            mode,
            f"{res['bytes']:.0f}",
            f"{s['exact']:.1%}",
            answer[:40],
            f"{s['agree']:.2%}",
            f"{s['kl']:.5f}",
            f"{s['ppl']:.3f}",
            f"{s['dppl'] * 100:+.2f}%",
            f"{res['tok_s']:.1f}",
            f"{res['tok_s'] / ref['tok_s']:.2f}×",
        )
        res["score"] = s
    Console(width=220).print(table)


def plot(model: str, args: argparse.Namespace, results: dict, path: Path) -> None:
    """Teacher-forced top-1 agreement with the bf16 cache per answer position, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for mode, res in results.items():
        if mode == "bf16":
            continue
        per = res["score"]["per_position"]
        xs = range(max(len(a) for a in per))
        rates = [sum(a[i] for a in per if len(a) > i) / max(1, sum(len(a) > i for a in per)) for i in xs]
        ax.plot(list(xs), rates, label=mode, linestyle="--" if "rot none" in mode else "-")
    ax.set_xlabel("answer position (tokens)")
    ax.set_ylabel("top-1 agreement with the bf16 cache")
    ax.set_title(f"KV fidelity per position: {model}, {args.dtype} model")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def run_model(name: str, args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    from assets import eval_text, fetch, model_dir

    fetch([name, "austen"])
    model = model_dir(name)
    tok = AutoTokenizer.from_pretrained(str(model))
    text_ids = tok.encode(eval_text()[-args.windows * 512 * 8 :], add_special_tokens=False)
    data = {
        "short": chat_ids(tok, short_prompts()[: args.short]),
        "instructions": chat_ids(tok, instructions(eval_text(), args.instructions)),
        "windows": [text_ids[i * 512 : (i + 1) * 512] for i in range(args.windows)],
        "calib": {},
    }
    modes = [m for m in MODES if m in args.modes.split(",")] if args.modes else list(MODES)
    for rotation in sorted({m.partition("+rot ")[2] for m in modes if "static" in m}):
        data["calib"][rotation] = calibration(model, rotation)
    results: dict = {}
    for mode in tqdm(["bf16"] + [m for m in modes if m != "bf16"], desc=f"{name} KV modes"):
        results[mode] = run_mode(model, mode, args, data, results.get("bf16"))
    print_table(name, args, results, tok)
    if args.png:
        plot(name, args, results, Path(args.png.format(model=name, dtype=args.dtype)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2,qwen3-tiny")
    parser.add_argument("--modes", default="", help="comma-separated subset of MODES (bf16 always runs)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--short", type=int, default=120)
    parser.add_argument("--short-tokens", type=int, default=24)
    parser.add_argument("--instructions", type=int, default=240)
    parser.add_argument("--answer-tokens", type=int, default=32)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--png", default=str(ROOT / "docs/img/kv_fidelity_{model}_{dtype}.png"))
    args = parser.parse_args()
    for name in args.models.split(","):
        run_model(name, args)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

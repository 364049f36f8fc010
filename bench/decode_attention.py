"""Batched decode attention vs the per-request loop, per KV mode and batch size.

For each KV mode and each attention arm, an in-process ``sglang.Engine`` (SmolLM2-135M, bf16,
torch_native through runtime_ext's backend) decodes for batches of ``--batches`` requests on the
same ``--context``-token window of held-out text (every request gathers its own ``context`` +
generated rows each step, shared or not, so one window costs the reads of ``batch`` windows and
the prefill of one). Decode speed is differential, so prefill never counts: the window is
prefilled once (the prefix cache keeps it), then each round times the batch with ``8`` and with
``8 + --new`` new tokens: ``batch × new / (t_long − t_short)``. The arms:

- ``batched``: ``attention: structserve`` (one gather + one attention call per layer);
- ``per_request``: the same backend's per-request loop (the previous decode path);
- ``sglang``: SGLang's own ``torch_native`` backend (whole-buffer reads for C8);
- ``reference``: ``batched`` with ``kv_kernels: reference``: the C8 rows read by the torch
  reference instead of the compiled one-pass read (``runtime_ext/ops/kv_cpu``); for bf16 it is
  ``batched`` again (a noise check).

Each pass starts every (mode, arm) engine in turn and keeps its best of ``--rounds`` decodes per
batch size; the table shows the best over ``--passes`` passes, the batched/per-request ratio
and each mode's batched speed against the bf16 cache's (single runs on this 2-core machine vary
by ±15 %, so arms alternate). A PNG of tok/s per batch size is written beside the table.

``--distinct`` adds a second layout beside the shared window: every request of a batch reads its
own ``--context``-token window (consecutive windows of the same text, all prefilled once and kept
in the prefix cache), so a batch of 32 reads 32 different sets of rows instead of one set 32
times. Each layout's rows are printed beside the other's, and ``vs bf16`` compares within a layout.

    .venv/bin/python bench/decode_attention.py
    .venv/bin/python bench/decode_attention.py --distinct
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

from kv_fidelity import calibration  # noqa: E402


def start(model: Path, mode: str, arm: str, calib: Path | None, dtype: str = "bfloat16"):
    from runtime_ext.config import RuntimeExtConfig
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    attention = {"batched": "structserve", "reference": "structserve"}.get(arm, arm)
    kernels = "reference" if arm == "reference" else "native"
    replace(RuntimeExtConfig.from_env(), kv_calibration=calib, attention=attention, kv_kernels=kernels).export()
    options = EngineOptions(
        model_path=model,
        dtype=dtype,
        engine=EngineSettings(max_total_tokens=40960),
        kv_cache=mode,
    )
    return sglang.Engine(**options.engine_kwargs())


def decode_speed(engine, prompts: list[list[int]], new: int) -> tuple[float, list]:
    """Decode tok/s of the batch ``prompts`` (``new`` more tokens per request, prefill subtracted),
    and the greedy tokens of the longer run."""
    seconds = []
    for n in (8, 8 + new):
        params = {"max_new_tokens": n, "ignore_eos": True, "temperature": 0}
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        seconds.append(time.perf_counter() - t0)
        assert all(o["meta_info"]["completion_tokens"] == n for o in outs)
    return len(prompts) * new / (seconds[1] - seconds[0]), [o["output_ids"] for o in outs]


def batch_windows(windows: list[list[int]], batch: int, layout: str) -> list[list[int]]:
    """The prompts of one batch: the first window ``batch`` times (``shared``), or the first
    ``batch`` windows, one per request (``distinct``)."""
    if layout == "shared":
        return [windows[0]] * batch
    if len(windows) < batch:
        raise ValueError(f"{len(windows)} distinct windows for a batch of {batch}")
    return windows[:batch]


def measure(model: Path, modes: list[str], arms: list[str], windows: list[list[int]], args) -> tuple[dict, dict]:
    """Best tok/s per (layout, mode, arm, batch), and the greedy tokens of each one's last round."""
    calib = calibration(model, "none") if any("static" in m for m in modes) else None
    batches = [int(b) for b in args.batches.split(",")]
    best: dict[tuple[str, str, str, int], float] = {}
    tokens: dict[tuple[str, str, str, int], list] = {}
    runs = [(mode, arm) for _ in range(args.passes) for mode in modes for arm in arms]
    for mode, arm in tqdm(runs, desc="engines"):
        engine = start(model, mode, arm, calib if "static" in mode else None)
        try:
            engine.generate(input_ids=windows, sampling_params={"max_new_tokens": 1})  # now in the prefix cache
            for layout in layouts(args):
                for b in batches:
                    prompts = batch_windows(windows, b, layout)
                    rounds = [decode_speed(engine, prompts, args.new) for _ in range(args.rounds)]
                    key = (layout, mode, arm, b)
                    best[key] = max(best.get(key, 0.0), max(r[0] for r in rounds))
                    tokens[key] = rounds[-1][1]
                    tqdm.write(f"{layout} {mode} {arm} batch {b}: {max(r[0] for r in rounds):.1f} tok/s")
        finally:
            engine.shutdown()
    return best, tokens


def layouts(args) -> list[str]:
    return ["shared", "distinct"] if args.distinct else ["shared"]


def report(best: dict, tokens: dict, modes: list[str], arms: list[str], args) -> None:
    batches = [int(b) for b in args.batches.split(",")]
    table = Table(title=f"decode tok/s: SmolLM2-135M bf16, {args.context}-token contexts, {args.new} new tokens")
    others = [arm for arm in arms if arm != "batched"]
    cols = ("KV", "batch", "window", *arms, *(f"batched / {arm}" for arm in others), "batched vs bf16 batched")
    for col in (*cols, "same tokens as batched"):
        table.add_column(col, justify="right")
    for mode in modes:
        for b in batches:
            for layout in layouts(args):
                at = {arm: best[layout, mode, arm, b] for arm in arms}
                ratios = [f"{at['batched'] / at[arm]:.2f}×" for arm in others]
                vs_bf16 = at["batched"] / best[layout, "bf16", "batched", b]
                ref = tokens[layout, mode, "batched", b]
                same = " ".join(f"{arm}: {tokens[layout, mode, arm, b] == ref}" for arm in others) or "-"
                row = [f"{at[arm]:.1f}" for arm in arms]
                table.add_row(mode, str(b), layout, *row, *ratios, f"{vs_bf16:.2f}×", same)
    Console(width=200).print(table)
    if args.png:
        plot(best, modes, arms, batches, args.png, layouts(args))


def plot(best: dict, modes: list[str], arms: list[str], batches: list[int], path: str, shapes: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(1, len(modes), figsize=(4 * len(modes), 3.5), sharey=True, squeeze=False)
    axes = list(grid[0])
    for ax, mode in zip(axes, modes):
        for layout in shapes:
            for arm in arms:
                label = arm if len(shapes) == 1 else f"{arm}, {layout} window"
                style = "-" if layout == "shared" else "--"
                ax.plot(batches, [best[layout, mode, arm, b] for b in batches], style, marker="o", label=label)
        ax.set_title(mode)
        ax.set_xlabel("batch")
        ax.set_xscale("log", base=2)
    axes[0].set_ylabel("decode tok/s")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="bf16,c8_dynamic,c8_static_residual")
    parser.add_argument("--arms", default="batched,per_request")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--distinct", action="store_true", help="also measure one window per request")
    parser.add_argument("--png", default=str(ROOT / "docs/img/decode_attention.png"))
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from assets import eval_text, fetch

    model = fetch(["smollm2", "austen"]).smollm2
    n_windows = max(int(b) for b in args.batches.split(",")) if args.distinct else 1
    text = eval_text()[: args.context * 8 * n_windows]
    ids = AutoTokenizer.from_pretrained(str(model)).encode(text, add_special_tokens=False)
    windows = [ids[i * args.context : (i + 1) * args.context] for i in range(n_windows)]
    if len(windows[-1]) < args.context:
        raise SystemExit(f"the eval text holds fewer than {n_windows} windows of {args.context} tokens")
    modes, arms = args.modes.split(","), args.arms.split(",")
    best, tokens = measure(model, modes, arms, windows, args)
    report(best, tokens, modes, arms, args)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""Decode speed of KV modes, interleaved: each pass starts every mode's engine in turn and keeps
the best of 3 batch-8 decodes; the table shows each mode's best over the passes and its ratio
to bf16 (single runs on this 2-core machine vary by ±15 %, so the modes alternate).

    .venv/bin/python bench/kv_fidelity_speed.py --modes "c8_dynamic+rot none,c8_dynamic+rot kv" --speed-passes 3
"""

from __future__ import annotations

import argparse
import os

from kv_fidelity import calibration, decode_speed, start
from rich.console import Console
from rich.table import Table
from tqdm import tqdm


def speed_only(name: str, args: argparse.Namespace) -> None:
    """Decode tok/s only, the modes interleaved over ``--speed-passes`` passes (best per mode)."""
    from transformers import AutoTokenizer

    from assets import eval_text, model_dir

    model = model_dir(name)
    prompt = AutoTokenizer.from_pretrained(str(model)).encode(eval_text()[:2000], add_special_tokens=False)
    modes = ["bf16"] + [m for m in args.modes.split(",") if m and m != "bf16"]
    calib = {r: calibration(model, r) for r in {m.partition("+rot ")[2] for m in modes if "static" in m}}
    best: dict[str, float] = {}
    for _ in tqdm(range(args.speed_passes), desc="passes"):
        for mode in modes:
            engine = start(model, mode, args.dtype, calib.get(mode.partition("+rot ")[2]) if "static" in mode else None)
            try:
                best[mode] = max(best.get(mode, 0.0), decode_speed(engine, prompt))
            finally:
                engine.shutdown()
    title = f"decode tok/s, batch 8 × 64 tokens: {name} in {args.dtype}, best of {args.speed_passes} passes × 3"
    table = Table(title=title)
    for col in ("KV", "tok/s", "vs bf16"):
        table.add_column(col, justify="right")
    for mode in modes:
        table.add_row(mode, f"{best[mode]:.1f}", f"{best[mode] / best['bf16']:.2f}×")
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2")
    parser.add_argument("--modes", default="c8_dynamic+rot none,c8_dynamic+rot kv")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--speed-passes", type=int, default=3)
    args = parser.parse_args()
    for name in args.models.split(","):
        speed_only(name, args)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

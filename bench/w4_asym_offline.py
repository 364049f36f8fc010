"""Offline experiment: GPTQ W4A16 g128 with a zero point per group (asymmetric INT4)
against the symmetric GPTQ that structserve exports, on SmolLM2 in HF float32.

Written to measure the gain before the served path existed; it now runs ``tools.quant.gptq.gptq``
with ``asym`` (per (row, group) ``scale = (max - min) / 15``, ``zero = round(-min / scale)``; the
clip search shrinks ``[min, max]``), the math ``structserve quant calibrate --method gptq --asym``
exports. Perplexity: 4,096 held-out tokens of *Persuasion*, 256-token windows
(``tools.quant.offline.perplexity``), on the dequantized weights.

    .venv/bin/python bench/w4_asym_offline.py            # float + 4 rows, about 5 min
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.quant import gptq as G  # noqa: E402
from tools.quant import layers as L  # noqa: E402
from tools.quant.offline import load_model, perplexity, token_ids  # noqa: E402

GROUP = 128


def quantized_ppl(model_dir: Path, calib: list[int], held: list[int], asym: bool, act_mse: bool) -> float:
    """Layers in order, each fed the already-quantized previous layers' outputs (as ``calibrate``)."""
    model = load_model(model_dir)
    xs, kws = L.layer_inputs(model, L.windows(calib, 512))
    for layer in tqdm(list(model.model.layers), desc=f"asym={asym} act-order+clip={act_mse}", leave=False):
        for names in L.SEQUENTIAL:
            hessian = G.Hessian(layer.get_submodule(names[0]).in_features)
            L.capture(layer, layer.get_submodule(names[0]), xs, kws, hessian.add)
            for name in names:
                lin = layer.get_submodule(name)
                q, s, off = G.gptq(lin.weight, hessian.h, 4, GROUP, act_order=act_mse, mse=act_mse, asym=asym)
                lin.weight.data = G.dequantize(q, s, GROUP, off).to(lin.weight.dtype)
        xs = L.run_layer(layer, xs, kws)
    return perplexity(model, held)


def main() -> None:
    from assets import calibration_text, eval_text, model_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calib-tokens", type=int, default=4096)
    args = parser.parse_args()
    torch.manual_seed(0)
    m = model_dir("smollm2")
    calib, held = token_ids(m, calibration_text(), args.calib_tokens), token_ids(m, eval_text(), 4096)
    base = perplexity(load_model(m), held)
    t = Table(title=f"W4A16 g{GROUP} GPTQ offline, SmolLM2 float32, {args.calib_tokens} calibration tokens")
    for col in ("INT4 grid", "act-order + clip", "perplexity", "Δ vs float"):
        t.add_column(col, justify="right")
    t.add_row("float32", "", f"{base:.3f}", "")
    for asym in (False, True):
        for act_mse in (False, True):
            ppl = quantized_ppl(m, calib, held, asym, act_mse)
            name = "asymmetric [0, 15] + zero" if asym else "symmetric [-8, 7] (served)"
            t.add_row(name, "yes" if act_mse else "no", f"{ppl:.3f}", f"{(ppl / base - 1) * 100:+.2f}%")
    Console(width=120).print(t)


if __name__ == "__main__":
    main()

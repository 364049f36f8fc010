"""Offline experiment (issue 17): GPTQ W4A16 g128 with a zero point per group (asymmetric INT4)
against the symmetric GPTQ that structserve exports, on SmolLM2 in HF float32.

Not a served path. The msModelSlim export has a ``weight_offset`` field, but
``runtime_ext/quant/checkpoint_method.py`` refuses non-zero offsets, so this measures the gain
before building it. The asymmetric quantizer: per (row, group) ``scale = (max - min) / 15``,
``zero = round(-min / scale)``, ``q = clamp(round(w / scale) + zero, 0, 15)``; the clip search
shrinks ``[min, max]`` like ``tools.quant.gptq._group_scales`` (mse). The column loop is GPTQ's
(Frantar et al. 2023, Algorithm 1, as in ``tools.quant.gptq.gptq``) with this quantizer. Perplexity:
4,096 held-out tokens of *Persuasion*, 256-token windows (``tools.quant.offline.perplexity``).

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


def asym_grid(w: torch.Tensor, mse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero) per (row, group) of ``w`` for 16 levels."""
    n, k = w.shape
    groups = -(-k // GROUP)
    p = torch.nn.functional.pad(w, (0, groups * GROUP - k)).reshape(n, groups, GROUP)
    lo, hi = p.amin(2).clamp(max=0), p.amax(2).clamp(min=0)
    best_s, best_z, err_best = None, None, torch.full_like(lo, float("inf"))
    for i in range(80 if mse else 1):
        f = 1 - i / 100
        s = ((hi - lo) * f / 15).clamp(min=1e-8)
        z = torch.round(-lo * f / s)
        q = torch.clamp(torch.round(p / s[..., None]) + z[..., None], 0, 15)
        err = ((q - z[..., None]) * s[..., None] - p).abs().pow(2.4).sum(2)
        better = err < err_best
        best_s = s if best_s is None else torch.where(better, s, best_s)
        best_z = z if best_z is None else torch.where(better, z, best_z)
        err_best = torch.where(better, err, err_best)
    return best_s, best_z


@torch.no_grad()
def gptq_asym(weight: torch.Tensor, h: torch.Tensor, act_order: bool, mse: bool) -> torch.Tensor:
    """The dequantized weight after asymmetric GPTQ (``tools.quant.gptq.gptq``'s loop)."""
    w = weight.detach().float().clone()
    n, k = w.shape
    perm = torch.argsort(torch.diag(h), descending=True) if act_order else torch.arange(k)
    static = asym_grid(w, mse) if act_order else None
    w, h = w[:, perm], h[perm][:, perm]
    u = G._inverse_factor(h, w, 0.01)
    scale, zero = static if static else (torch.ones(n, -(-k // GROUP)), torch.zeros(n, -(-k // GROUP)))
    deq = torch.zeros(n, k)
    for i1 in range(0, k, GROUP):
        i2 = min(i1 + GROUP, k)
        block, err = w[:, i1:i2].clone(), torch.zeros(n, i2 - i1)
        if static is None:
            s, z = asym_grid(block, mse)
            scale[:, i1 // GROUP], zero[:, i1 // GROUP] = s[:, 0], z[:, 0]
        for i in range(i2 - i1):
            g = int(perm[i1 + i]) // GROUP
            q = torch.clamp(torch.round(block[:, i] / scale[:, g]) + zero[:, g], 0, 15)
            deq[:, i1 + i] = (q - zero[:, g]) * scale[:, g]
            err[:, i] = (block[:, i] - deq[:, i1 + i]) / u[i1 + i, i1 + i]
            block[:, i:] -= err[:, i : i + 1] @ u[i1 + i : i1 + i + 1, i1 + i : i2]
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return deq[:, torch.argsort(perm)]


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
                if asym:
                    deq = gptq_asym(lin.weight, hessian.h, act_mse, act_mse)
                else:
                    q, s = G.gptq(lin.weight, hessian.h, 4, GROUP, act_order=act_mse, mse=act_mse)
                    deq = G.dequantize(q, s, GROUP)
                lin.weight.data = deq.to(lin.weight.dtype)
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

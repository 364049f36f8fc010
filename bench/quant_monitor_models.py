"""Model copies for the fallback-effect workload of ``bench/quant_monitor.py``.

Two ways to give SmolLM2-135M the activation outliers an online monitor is for:

- ``comma_copy``: a *massive activation* on the ',' token. Its input embedding gets +boost × the row
  RMS in one channel, as Sun et al. 2024 (arXiv:2402.17762) found on a few frequent tokens. The
  residual stream carries it into every layer, so the INT8 loss it causes is spread over the model.
- ``channel_copy``: an *outlier channel* at the input of a few ``down_proj`` modules, the place
  where large LLMs carry theirs (the "super activations" of Yu et al. 2024, arXiv:2411.07918;
  LLM.int8()'s outlier features, Dettmers et al. 2022). In each chosen layer, one intermediate
  neuron's ``up_proj`` row is multiplied by ``scale`` and its ``down_proj`` column divided by it.
  The scale is a power of two, so the bf16 model computes exactly what the original does; only a
  per-token INT8 quantization of that ``down_proj`` input sees the difference. This is
  SmoothQuant's transform run backwards, and it yields what real outlier channels look like: a
  large activation channel meeting a small weight column. The neuron is the one whose spikes the
  monitor's rule would count most often on the calibration text (never the held-out text).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path


def _copy(base: Path, out: Path, tensors: dict, untie: bool) -> Path:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    for f in base.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy(f, out / f.name)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    if untie:
        config = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=1))
    return out


def comma_copy(base: Path, work: Path, boost: float) -> Path:
    """The copy with a massive activation on ',' (cached in ``work``)."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    out = work / f"smollm2-massive-{boost:g}"
    if (out / "config.json").is_file():
        return out
    tensors = load_file(str(base / "model.safetensors"))
    embed = tensors["model.embed_tokens.weight"]
    tensors["lm_head.weight"] = embed.clone()  # untied: the output side stays the original
    comma = AutoTokenizer.from_pretrained(str(base)).encode(",", add_special_tokens=False)[0]
    channel = int(embed.float().abs().mean(0).argmax())
    row = embed[comma].float()
    row[channel] += boost * float(row.square().mean().sqrt())
    embed[comma] = row.to(embed.dtype)
    print(f"model copy: token {comma} (',') channel {channel} +{boost}× its row RMS -> {out}")
    return _copy(base, out, tensors, untie=True)


def down_proj_inputs(base: Path, windows: list[list[int]], layers: list[int]) -> dict:
    """Each chosen layer's ``down_proj`` input over ``windows`` (HF, float32): ``{layer: [tokens, ffn]}``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval()
    seen: dict[int, list] = {i: [] for i in layers}
    for i in layers:
        hook = lambda _m, args, i=i: seen[i].append(args[0][0].detach())  # noqa: E731
        model.model.layers[i].mlp.down_proj.register_forward_pre_hook(hook)
    with torch.no_grad():
        for ids in windows:
            model(torch.tensor([ids]))
    return {i: torch.cat(v) for i, v in seen.items()}


def monitor_rate(absmax, sigma: float, warmup: int, chunk: int):
    """The monitor's outlier share per candidate column of ``absmax`` [tokens, candidates]: each
    chunk of tokens judged against the mean + sigma·σ of the tokens before it, after ``warmup``."""
    import torch

    counts, seen = torch.zeros(absmax.shape[1]), 0
    for start in range(warmup, absmax.shape[0] - chunk + 1, chunk):
        before = absmax[:start]
        counts += (absmax[start : start + chunk] > before.mean(0) + sigma * before.std(0)).sum(0)
        seen += chunk
    return counts / max(seen, 1)


def pick_neuron(acts, scale: float, sigma: float) -> tuple[int, float]:
    """The neuron whose ×``scale`` spikes the monitor would count most often, and that share."""
    import torch

    mag = acts.abs()
    rates = monitor_rate(torch.maximum(scale * mag, mag.amax(-1, keepdim=True)), sigma, 256, 128)
    best = int(rates.argmax())
    return best, float(rates[best])


def channel_copy(
    base: Path, work: Path, calib: list[list[int]], layers: list[int], scale: float, picked_on: str = "warmup"
) -> Path:
    """The copy with an outlier channel at ``down_proj``'s input in each of ``layers`` (cached),
    its neurons picked on ``calib`` (``picked_on`` names that text in the cache's name)."""
    from safetensors.torch import load_file

    tag = "" if picked_on == "warmup" else f"-{picked_on}"
    out = work / f"smollm2-channel-{'-'.join(map(str, layers))}-x{scale:g}{tag}"
    if (out / "config.json").is_file():
        return out
    if scale <= 0 or 2 ** round(math.log2(scale)) != scale:
        raise ValueError(f"--scale must be a power of two (bf16 stays exact), got {scale}")
    tensors = load_file(str(base / "model.safetensors"))
    acts = down_proj_inputs(base, calib, layers)
    for i in layers:
        neuron, rate = pick_neuron(acts[i], scale, sigma=4.0)
        mlp = f"model.layers.{i}.mlp"
        tensors[f"{mlp}.up_proj.weight"][neuron] *= scale
        tensors[f"{mlp}.down_proj.weight"][:, neuron] /= scale
        print(f"model copy: layer {i} neuron {neuron} ×{scale:g} (calibration outlier share {rate:.1%})")
    return _copy(base, out, tensors, untie=False)

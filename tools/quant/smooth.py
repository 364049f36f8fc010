"""SmoothQuant for Llama/Qwen-style decoders (torch), behind ``structserve quant calibrate``.

Per input channel j of a linear group, ``s_j = max|X_j|^α / max|W_j|^(1−α)`` (activation
absmax from calibration text, weight absmax over every output row of the group). Dividing
the activations by ``s`` and multiplying the weight columns by ``s`` leaves the product
unchanged in exact arithmetic but moves activation outliers into the weights, where
per-channel INT8 handles them. The division is folded into the op that produces X:

- q/k/v: ``input_layernorm.weight /= s``; gate/up: ``post_attention_layernorm.weight /= s``;
- o_proj: the rows of ``v_proj`` (attention output is linear in V; with grouped-query
  attention the q heads sharing a KV head share one factor, the max over them);
- down_proj: the rows of ``up_proj`` (``act(gate) * up`` is linear in up).

``calibrate`` tries a grid of α, measures W8A8 calibration perplexity of each (fake-quantized
with the serving math) and keeps the best (AWQ-style search); it writes a smoothed checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from runtime_ext.quant.policy import QuantPolicy
from tools.quant.offline import linear_layers, load_model, perplexity, quantize_model, token_ids

ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7)


@torch.no_grad()
def activation_absmax(model: Any, ids: list[int], window: int = 256) -> dict[str, torch.Tensor]:
    """Per linear layer, the absmax of each input channel over the calibration tokens."""
    stats: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(_module, args):
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(dim=0).float()
            stats[name] = torch.maximum(stats[name], x) if name in stats else x

        return record

    handles = [lin.register_forward_pre_hook(hook(name)) for name, lin in linear_layers(model).items()]
    try:
        for start in range(0, len(ids), window):
            model(torch.tensor([ids[start : start + window]]))
    finally:
        for h in handles:
            h.remove()
    return stats


def _factors(x_max: torch.Tensor, weights: list[torch.Tensor], alpha: float) -> torch.Tensor:
    w_max = torch.cat([w.abs() for w in weights]).amax(dim=0).float().clamp_min(1e-5)
    return (x_max.clamp_min(1e-5).pow(alpha) / w_max.pow(1 - alpha)).clamp_min(1e-5)


@torch.no_grad()
def smooth_(model: Any, stats: dict[str, torch.Tensor], alpha: float) -> None:
    """Fold SmoothQuant factors into ``model`` in place."""
    for i, layer in enumerate(model.model.layers):
        p, attn, mlp = f"model.layers.{i}", layer.self_attn, layer.mlp
        qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        s = _factors(stats[f"{p}.self_attn.q_proj"], [m.weight for m in qkv], alpha)
        layer.input_layernorm.weight.div_(s.to(layer.input_layernorm.weight.dtype))
        for m in qkv:
            m.weight.mul_(s.to(m.weight.dtype))
        s = _factors(stats[f"{p}.mlp.gate_proj"], [mlp.gate_proj.weight, mlp.up_proj.weight], alpha)
        layer.post_attention_layernorm.weight.div_(s.to(layer.post_attention_layernorm.weight.dtype))
        for m in (mlp.gate_proj, mlp.up_proj):
            m.weight.mul_(s.to(m.weight.dtype))
        s = _factors(stats[f"{p}.mlp.down_proj"], [mlp.down_proj.weight], alpha)
        mlp.up_proj.weight.div_(s.unsqueeze(1).to(mlp.up_proj.weight.dtype))
        mlp.down_proj.weight.mul_(s.to(mlp.down_proj.weight.dtype))
        _smooth_o_proj(attn, stats[f"{p}.self_attn.o_proj"], alpha)


def _smooth_o_proj(attn: Any, x_max: torch.Tensor, alpha: float) -> None:
    kv_rows, head_dim = attn.v_proj.weight.shape[0], attn.head_dim
    kv_heads, q_heads = kv_rows // head_dim, x_max.numel() // head_dim
    s = _factors(x_max, [attn.o_proj.weight], alpha).reshape(q_heads, head_dim)
    s_kv = s.reshape(kv_heads, q_heads // kv_heads, head_dim).amax(dim=1)  # one factor per KV channel
    attn.v_proj.weight.div_(s_kv.reshape(-1, 1).to(attn.v_proj.weight.dtype))
    if attn.v_proj.bias is not None:
        attn.v_proj.bias.div_(s_kv.reshape(-1).to(attn.v_proj.bias.dtype))
    expanded = s_kv.repeat_interleave(q_heads // kv_heads, dim=0).reshape(-1)
    attn.o_proj.weight.mul_(expanded.to(attn.o_proj.weight.dtype))


def stored_dtype(model_dir: Path) -> torch.dtype:
    """The dtype ``config.json`` gives the checkpoint (``dtype``, or ``torch_dtype`` before transformers 5).
    Not the loaded model's config: loading in float32 rewrites it."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return getattr(torch, str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", ""))


def calibrate(
    model_dir: Path,
    text: str,
    out_dir: Path,
    *,
    tokens: int = 1024,
    alphas: tuple = ALPHAS,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
) -> dict:
    """Search α on W8A8 calibration perplexity, write the smoothed checkpoint; returns the results."""
    ids = token_ids(model_dir, text, tokens)
    stats = activation_absmax(load_model(model_dir), ids)
    results = {"plain": perplexity(quantize_model(load_model(model_dir), QuantPolicy("w8a8_dynamic")), ids)}
    for alpha in progress(list(alphas)):
        model = load_model(model_dir)
        smooth_(model, stats, alpha)
        results[alpha] = perplexity(quantize_model(model, QuantPolicy("w8a8_dynamic")), ids)
    best = min(alphas, key=lambda a: results[a])
    model = load_model(model_dir)  # fold in float32, store in the checkpoint's own dtype
    smooth_(model, stats, best)
    save_checkpoint(model, model_dir, out_dir)
    return {"alpha": best, "calibration_ppl": results}


def save_checkpoint(model: Any, model_dir: Path, out_dir: Path) -> None:
    """Save a (float32) transformed model in the original checkpoint's dtype, with its tokenizer."""
    model.to(stored_dtype(model_dir)).save_pretrained(str(out_dir))
    for path in Path(model_dir).iterdir():  # tokenizer and chat template travel with the checkpoint
        if (
            path.is_file()
            and not path.name.endswith((".safetensors", ".bin"))
            and path.name != "config.json"
            and not (out_dir / path.name).exists()
        ):
            shutil.copy2(path, out_dir / path.name)

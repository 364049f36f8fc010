"""AWQ (Lin et al., "AWQ: Activation-aware Weight Quantization for LLM Compression and
Acceleration", MLSys 2024, arXiv:2306.00978) for Llama-style decoders (torch).

Per group of linear layers sharing an input X (``layers.SEQUENTIAL``, i.e. SGLang's fused
qkv/gate_up modules plus o_proj and down_proj), on the calibration split's real activations:

1. ``s_X`` = mean |X_j| per input channel (§3.2, "activation-aware scaling").
2. Grid search over α ∈ {0, 1/20, …, 19/20}: ``s = s_X^α``, normalised by ``sqrt(max s · min s)``
   (the reference ``auto_scale.py``), loss ``‖X Wᵀ − X (Q(W·s)/s)ᵀ‖²`` over the group's outputs
   (eq. 5; Q = our group-wise RTN, ``runtime_ext.ops.quant_ref``); keep the best α.
3. Fold ``s`` into the previous op (an exact transform, like ``tools/quant/smooth.py``): the
   norm weight for q/k/v and gate/up; the rows of v_proj for o_proj (grouped-query attention:
   one factor per KV channel, the mean of its q heads' ``s_X``); the rows of up_proj for
   down_proj. Row scaling of v/up leaves their own group-wise quantization unchanged.
4. Optional clip search (the reference ``auto_clip.py``; not for q/k, whose errors the
   softmax amplifies): per output row and group, the max |w| shrunk by 0–45 % in steps of
   5 %, choosing the shrink with the least squared error of that group's partial outputs.

Layers are processed in order on the float (scaled) model's activations. The output is a
high-precision checkpoint: the existing ``w4a16`` path (online or ``quant export``) quantizes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from runtime_ext.ops import quant_ref
from runtime_ext.quant.policy import QuantPolicy
from tools.quant import layers as L
from tools.quant.offline import load_model, token_ids
from tools.quant.smooth import save_checkpoint

GRID = 20
SEARCH_TOKENS = 2048
CLIP_TOKENS = 512
CLIP_SHRINK = tuple(1 - i / GRID for i in range(GRID // 2))


def rtn(w: torch.Tensor, policy: QuantPolicy) -> torch.Tensor:
    """Group-wise RTN and back (float), the serving math."""
    q, scale = quant_ref.quantize_weight_groupwise(w, policy.bits, policy.group_size)
    return quant_ref.dequantize_weight_groupwise(q, scale, policy.bits, policy.group_size, torch.float32)


def search_scale(
    x: torch.Tensor, weights: list[torch.Tensor], policy: QuantPolicy, tie: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, float]:
    """Steps 1-2: the per-input-channel scale with the least output error, and its α
    (``tie`` maps a candidate to one the fold can apply: identity but for o_proj)."""
    w = torch.cat([t.float() for t in weights])
    x_mean = x.abs().mean(dim=0).clamp_min(1e-5)
    ref = x @ w.T
    best: tuple[float, float, torch.Tensor] = (float("inf"), 0.0, torch.ones_like(x_mean))
    for i in range(GRID):
        s = x_mean.pow(i / GRID)
        s = tie(s / (s.max() * s.min()).sqrt())
        loss = float((ref - x @ (rtn(w * s, policy) / s).T).pow(2).mean())
        if loss < best[0]:
            best = (loss, i / GRID, s)
    return best[2], best[1]


@torch.no_grad()
def search_clip(x: torch.Tensor, weight: torch.Tensor, policy: QuantPolicy) -> torch.Tensor:
    """Step 4: ``weight`` clipped per (row, group) to the shrink with the least partial-output error."""
    w = weight.float()
    n, k = w.shape
    g = policy.group_size
    groups = -(-k // g)
    wg = torch.nn.functional.pad(w, (0, groups * g - k)).reshape(n, groups, g)
    xg = torch.nn.functional.pad(x.float(), (0, groups * g - k)).reshape(-1, groups, g)
    ref = torch.einsum("tgk,ngk->ntg", xg, wg)
    absmax = wg.abs().amax(dim=2, keepdim=True)
    best_err = torch.full((n, groups, 1), float("inf"))
    best_max = absmax.clone()
    for shrink in CLIP_SHRINK:
        m = absmax * shrink
        clipped = torch.maximum(torch.minimum(wg, m), -m).reshape(n, groups * g)[:, :k]
        qg = torch.nn.functional.pad(rtn(clipped, policy), (0, groups * g - k)).reshape(n, groups, g)
        err = (torch.einsum("tgk,ngk->ntg", xg, qg) - ref).pow(2).mean(dim=1).unsqueeze(2)
        better = err < best_err
        best_err, best_max = torch.where(better, err, best_err), torch.where(better, m, best_max)
    return torch.maximum(torch.minimum(wg, best_max), -best_max).reshape(n, groups * g)[:, :k]


def _inputs(layer: Any, module: torch.nn.Module, xs: list, kws: list, limit: int) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    L.capture(layer, module, xs, kws, seen.append)
    x = torch.cat(seen).float()
    return x[:: max(1, x.shape[0] // limit)][:limit]


def _fold(layer: Any, names: tuple[str, ...], s: torch.Tensor) -> None:
    """Step 3: divide the producer of the group's input by ``s``, multiply the group's columns."""
    attn, mlp = layer.self_attn, layer.mlp
    if names[0] == "self_attn.o_proj":  # s is tied per KV channel (_tie_kv)
        kv_heads = attn.v_proj.out_features // attn.head_dim
        s_kv = s.reshape(kv_heads, -1, attn.head_dim)[:, 0].reshape(-1)
        attn.v_proj.weight.div_(s_kv.unsqueeze(1))
        if attn.v_proj.bias is not None:
            attn.v_proj.bias.div_(s_kv)
        attn.o_proj.weight.mul_(s)
        return
    producer = {
        "self_attn.q_proj": layer.input_layernorm.weight,
        "mlp.gate_proj": layer.post_attention_layernorm.weight,
        "mlp.down_proj": None,
    }[names[0]]
    if producer is None:
        mlp.up_proj.weight.div_(s.unsqueeze(1))
    else:
        producer.div_(s)
    for name in names:
        layer.get_submodule(name).weight.mul_(s)


def _tie_kv(attn: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """o_proj under grouped-query attention: the q heads sharing a KV head share its factor
    (the mean of theirs), since the fold divides that KV head's v_proj rows."""
    kv_heads = attn.v_proj.out_features // attn.head_dim

    def tie(s: torch.Tensor) -> torch.Tensor:
        shared = s.reshape(kv_heads, -1, attn.head_dim)
        return shared.mean(dim=1, keepdim=True).expand_as(shared).reshape(-1)

    return tie


@torch.no_grad()
def scale_layer(layer: Any, xs: list, kws: list, policy: QuantPolicy, clip: bool) -> dict[str, float]:
    """AWQ of one decoder layer, in place; returns the chosen α per group."""
    alphas = {}
    for names in L.SEQUENTIAL:
        modules = [layer.get_submodule(n) for n in names]
        x = _inputs(layer, modules[0], xs, kws, SEARCH_TOKENS)
        tie = _tie_kv(layer.self_attn) if names[0] == "self_attn.o_proj" else (lambda s: s)
        s, alphas[names[0]] = search_scale(x, [m.weight for m in modules], policy, tie)
        _fold(layer, names, s)
        if clip:
            x = x[:: max(1, x.shape[0] // CLIP_TOKENS)][:CLIP_TOKENS] / s
            for name, m in zip(names, modules):
                if name not in ("self_attn.q_proj", "self_attn.k_proj"):
                    m.weight.copy_(search_clip(x, m.weight, policy))
    return alphas


def calibrate(
    model_dir: Path,
    text: str,
    out_dir: Path,
    policy: QuantPolicy,
    *,
    tokens: int = 4096,
    window: int = 512,
    clip: bool = True,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
) -> dict[str, dict[str, float]]:
    """AWQ over every decoder layer in order; writes the scaled (and clipped) checkpoint."""
    model = load_model(model_dir)
    xs, kws = L.layer_inputs(model, L.windows(token_ids(model_dir, text, tokens), window))
    chosen = {}
    for i, layer in enumerate(progress(list(model.model.layers))):
        chosen[f"model.layers.{i}"] = scale_layer(layer, xs, kws, policy, clip)
        xs = L.run_layer(layer, xs, kws)
    save_checkpoint(model, model_dir, out_dir)
    return chosen

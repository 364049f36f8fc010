"""Layer-by-layer calibration on a HF Llama-style decoder (torch), shared by GPTQ and AWQ.

The calibration text is cut into equal windows; ``layer_inputs`` runs the embedding and
stops at decoder layer 0, keeping what enters it per window (hidden states and the keyword
arguments the model passes: rotary embeddings, mask). ``run_layer`` then pushes those
through one decoder layer, so a calibration holds one layer's activations at a time.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

# Linear layers per decoder layer in forward order, grouped by shared input (SGLang fuses
# q/k/v into qkv_proj and gate/up into gate_up_proj: one input, one Hessian, one AWQ scale).
SEQUENTIAL = (
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    ("self_attn.o_proj",),
    ("mlp.gate_proj", "mlp.up_proj"),
    ("mlp.down_proj",),
)


class _Stop(Exception):
    pass


def windows(ids: list[int], window: int) -> list[list[int]]:
    """Equal windows (the ragged tail is dropped); at least one."""
    full = [ids[i : i + window] for i in range(0, len(ids) - window + 1, window)]
    return full or [ids]


@torch.no_grad()
def layer_inputs(model: Any, pieces: list[list[int]]) -> tuple[list[torch.Tensor], list[dict]]:
    """What enters decoder layer 0 for each window: hidden states and keyword arguments."""
    xs: list[torch.Tensor] = []
    kws: list[dict] = []

    def catch(_module, args, kwargs):
        xs.append(args[0] if args else kwargs.pop("hidden_states"))
        kws.append({k: v for k, v in kwargs.items() if k not in ("past_key_values", "use_cache")})
        raise _Stop

    handle = model.model.layers[0].register_forward_pre_hook(catch, with_kwargs=True)
    try:
        for piece in pieces:
            try:
                model(torch.tensor([piece]), use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    return xs, kws


@torch.no_grad()
def run_layer(layer: Any, xs: list[torch.Tensor], kws: list[dict]) -> list[torch.Tensor]:
    out = []
    for x, kw in zip(xs, kws):
        y = layer(x, **kw)
        out.append(y[0] if isinstance(y, tuple) else y)
    return out


@torch.no_grad()
def capture(
    layer: Any, module: torch.nn.Module, xs: list[torch.Tensor], kws: list[dict], fn: Callable[[torch.Tensor], None]
) -> None:
    """Run ``layer`` on every window and call ``fn`` with each input of ``module`` (``[T, K]``)."""

    def hook(_module, args):
        fn(args[0].detach().reshape(-1, args[0].shape[-1]))

    handle = module.register_forward_pre_hook(hook)
    try:
        run_layer(layer, xs, kws)
    finally:
        handle.remove()

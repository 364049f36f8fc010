"""Offline quantization tools on a HF transformers model (torch): fake-quantized linear
layers with exactly the serving math (``runtime_ext.ops.quant_ref``), calibration
perplexity, and the per-layer sensitivity scan behind ``structserve quant scan``.

Layer names are the checkpoint's (``model.layers.3.mlp.down_proj``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from runtime_ext.ops import quant_ref
from runtime_ext.quant.policy import LINEAR_SUFFIXES, QuantPolicy
from runtime_ext.quant.sensitivity import dispersion


class FakeQuantLinear(torch.nn.Module):
    """A linear layer computed like the served quantized one (same ops)."""

    def __init__(self, linear: torch.nn.Linear, policy: QuantPolicy) -> None:
        super().__init__()
        self.bias = linear.bias
        if policy.scheme == "w8a8_dynamic":
            self.w8a8 = quant_ref.prepare_w8a8(*quant_ref.quantize_weight_per_channel(linear.weight.data))
        else:
            q, scale = quant_ref.quantize_weight_groupwise(linear.weight.data, policy.bits, policy.group_size)
            self.prepared = quant_ref.prepare_weight_only(q, scale, policy.bits, policy.group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if hasattr(self, "w8a8"):
            y = quant_ref.w8a8_matmul(x2, *self.w8a8, self.bias)
        else:
            y = quant_ref.weight_only_matmul(x2, self.prepared, self.bias)
        return y.reshape(*shape[:-1], y.shape[-1])


def load_model(model_dir: Path, dtype: torch.dtype = torch.float32) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).eval()


def linear_layers(model: Any) -> dict[str, torch.nn.Linear]:
    return {
        name: mod
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and name.rpartition(".")[2] in LINEAR_SUFFIXES
    }


def _set(model: Any, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, module)


def quantize_model(model: Any, policy: QuantPolicy) -> Any:
    """Replace every linear layer not in ``policy.keep`` by its fake-quantized version (in place).
    ``keep`` is closed over fused modules (``QuantPolicy``), so this keeps what serving keeps."""
    for name, linear in linear_layers(model).items():
        if name not in policy.keep:
            _set(model, name, FakeQuantLinear(linear, policy))
    return model


def token_ids(model_dir: Path, text: str, tokens: int) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return tok.encode(text[: tokens * 16], add_special_tokens=False)[:tokens]


@torch.no_grad()
def log_probs(model: Any, ids: list[int], window: int = 256) -> list[torch.Tensor]:
    """Next-token log-probabilities per window (float32, ``[T-1, vocab]`` each)."""
    out = []
    for start in range(0, len(ids) - 1, window):
        piece = torch.tensor([ids[start : start + window]])
        if piece.shape[1] > 1:
            out.append(torch.log_softmax(model(piece).logits[0, :-1].float(), dim=-1))
    return out


def perplexity(model: Any, ids: list[int], window: int = 256) -> float:
    nll, count = 0.0, 0
    for start, lp in zip(range(0, len(ids) - 1, window), log_probs(model, ids, window)):
        target = torch.tensor(ids[start + 1 : start + 1 + lp.shape[0]])
        nll -= float(lp.gather(1, target.unsqueeze(1)).sum())
        count += target.numel()
    return math.exp(nll / count)


def _kl(ref: list[torch.Tensor], test: list[torch.Tensor]) -> float:
    total = sum(float((r.exp() * (r - t)).sum()) for r, t in zip(ref, test))
    return total / sum(r.shape[0] for r in ref)


def _weight_scores(weight: torch.Tensor) -> dict[str, float]:
    w = weight.detach().float()
    sample = w.flatten()
    if sample.numel() > 1_000_000:  # quantiles of a large tensor: an even subsample
        sample = sample[:: sample.numel() // 1_000_000 + 1]
    values = torch.sort(sample).values.tolist()
    sigma = torch.linalg.svdvals(w)
    return {"dispersion": dispersion(values), "energy": float(sigma[0] / sigma.sum())}


def scan(
    model_dir: Path,
    text: str,
    policy: QuantPolicy,
    *,
    tokens: int = 512,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
) -> dict[str, dict[str, float]]:
    """Per linear layer: weight dispersion R, energy σ₁/Σσ, and the KL of the model's
    next-token distribution with only that layer quantized (``policy.scheme``) vs none."""
    model = load_model(model_dir)
    ids = token_ids(model_dir, text, tokens)
    reference = log_probs(model, ids)
    scores = {}
    for name, linear in progress(list(linear_layers(model).items())):
        _set(model, name, FakeQuantLinear(linear, policy))
        scores[name] = {"kl": _kl(reference, log_probs(model, ids)), **_weight_scores(linear.weight)}
        _set(model, name, linear)
    return scores

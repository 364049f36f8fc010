"""GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
Pre-trained Transformers", ICLR 2023, arXiv:2210.17323) for W4A16 / W8A16 in our layout.

Per linear layer ``W[N, K]`` with calibration inputs ``X[K, T]`` the method minimises
``‖WX − ŴX‖²`` one input column at a time (the paper's Algorithm 1):

1. ``H = 2/T · X Xᵀ`` (§3, eq. 2; accumulated as a running mean over windows);
   dead inputs (``H_jj = 0``) get ``H_jj = 1`` and zero weights.
2. Dampening: ``H += λ · mean(diag H) · I``, λ = 0.01 (§4 "Cholesky reformulation").
3. ``U = chol(H⁻¹)ᵀ`` (upper Cholesky factor of the inverse; §4, "Step 3").
4. Columns in blocks of B (lazy batch updates, §4 "Step 2"): quantize column j to ``q_j``,
   error ``e = (w_j − q̂_j) / U_jj``, update the block's later columns ``W[:, j:] −= e U[j, j:]``;
   after the block, ``W[:, rest] −= E · U[block, rest]``.
5. Groups (§5 / the reference ``gptq.py``): the scale of a group of G input columns is taken
   from the *updated* weights when the column loop reaches the group (B = G keeps them aligned).
   With act-order (columns by decreasing ``H_jj``, the reference's ``--act-order``) the scales
   are fixed up front from the original weights per contiguous group ("static groups"),
   because our layout (``runtime_ext/quant/modelslim.py``) has no ``g_idx``: group g is
   always columns ``[gG, (g+1)G)``.

Symmetric like ``runtime_ext.ops.quant_ref``: ``scale = absmax / qmax`` (qmax 7 or 127),
values clamped to [-8, 7] (INT4) or [-127, 127]. The result is stored values + scales,
written by ``tools.quant.export.export(precomputed=...)``: never a float copy.

``calibrate`` processes decoder layers in order; each layer sees the outputs of the already
quantized previous layers, and inside a layer the groups of ``layers.SEQUENTIAL`` are
quantized in forward order ("true sequential"), so o_proj's Hessian sees quantized q/k/v.
Only one Hessian (``K × K``) lives at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from runtime_ext.ops import quant_ref
from runtime_ext.quant import modelslim
from runtime_ext.quant.policy import QuantPolicy
from tools.quant import layers as L
from tools.quant.offline import load_model, token_ids

QMIN = {4: -8, 8: -127}


class Hessian:
    """Running ``2/T · Σ x xᵀ`` over calibration inputs ``x[T, K]`` (float64 accumulate)."""

    def __init__(self, k: int) -> None:
        self.h = torch.zeros(k, k, dtype=torch.float64)
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1]).double()
        t = x.shape[0]
        self.h *= self.count / (self.count + t)
        self.count += t
        x = x * math.sqrt(2 / self.count)
        self.h += x.T @ x


def _group_scales(w: torch.Tensor, bits: int, group: int, mse: bool = False) -> torch.Tensor:
    """``absmax / qmax`` per (row, group); with ``mse`` the absmax shrunk by 0-79 % in 1 % steps
    to the least ``Σ|w − Q(w)|^2.4`` (the reference ``quant.py`` ``Quantizer(mse=True)``)."""
    n, k = w.shape
    groups = -(-k // group)
    padded = torch.nn.functional.pad(w, (0, groups * group - k)).reshape(n, groups, group)
    scale = padded.abs().amax(dim=2) / quant_ref.QMAX[bits]
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    if not mse:
        return scale
    best, err_best = scale, torch.full_like(scale, float("inf"))
    for i in range(80):
        s = (scale * (1 - i / 100)).unsqueeze(2)
        q = torch.clamp(torch.round(padded / s), QMIN[bits], quant_ref.QMAX[bits])
        err = (q * s - padded).abs().pow(2.4).sum(dim=2)
        better = err < err_best
        best, err_best = torch.where(better, s[..., 0], best), torch.where(better, err, err_best)
    return best


def _inverse_factor(h: torch.Tensor, w: torch.Tensor, damp: float) -> torch.Tensor:
    """Steps 1-3: dead columns, dampening, upper Cholesky factor of H⁻¹ (modifies w)."""
    h = h.clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    h += damp * torch.mean(torch.diag(h)) * torch.eye(h.shape[0], dtype=h.dtype)
    return torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True).float()


@torch.no_grad()
def gptq(
    weight: torch.Tensor,
    h: torch.Tensor,
    bits: int,
    group: int,
    *,
    damp: float = 0.01,
    act_order: bool = False,
    mse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight[N, K]``, ``h[K, K]`` -> (int8 values ``[N, K]``, float32 ``scale[N, ceil(K/G)]``)."""
    w = weight.detach().float().clone()
    n, k = w.shape
    perm = torch.argsort(torch.diag(h), descending=True) if act_order else torch.arange(k)
    static = _group_scales(w, bits, group, mse) if act_order else None
    w, h = w[:, perm], h[perm][:, perm]
    u = _inverse_factor(h, w, damp)
    scale = static if static is not None else torch.ones(n, -(-k // group))
    q = torch.zeros(n, k)
    for i1 in range(0, k, group):  # block size B = G
        i2 = min(i1 + group, k)
        block, err = w[:, i1:i2].clone(), torch.zeros(n, i2 - i1)
        if static is None:
            scale[:, i1 // group] = _group_scales(block, bits, group, mse)[:, 0]
        for i in range(i2 - i1):
            s = scale[:, int(perm[i1 + i]) // group]
            q[:, i1 + i] = torch.clamp(torch.round(block[:, i] / s), QMIN[bits], quant_ref.QMAX[bits])
            err[:, i] = (block[:, i] - q[:, i1 + i] * s) / u[i1 + i, i1 + i]
            block[:, i:] -= err[:, i : i + 1] @ u[i1 + i : i1 + i + 1, i1 + i : i2]
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return q[:, torch.argsort(perm)].to(torch.int8), scale.float()


def dequantize(q: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    return q.float() * scale.repeat_interleave(group, dim=1)[:, : q.shape[1]]


class QuantizedLinear(torch.nn.Module):
    """Serves given stored values + scales with the serving math (``weight_only_matmul``)."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bits: int, group: int, bias: Any = None) -> None:
        super().__init__()
        packed = quant_ref.pack_int4(q) if bits == 4 else q
        self.prepared = quant_ref.prepare_weight_only(packed, scale, bits, group)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = quant_ref.weight_only_matmul(x.reshape(-1, shape[-1]), self.prepared, self.bias)
        return y.reshape(*shape[:-1], y.shape[-1])


def apply(model: Any, quantized: dict[str, tuple[torch.Tensor, torch.Tensor]], policy: QuantPolicy) -> Any:
    """Replace the layers in ``quantized`` by ``QuantizedLinear`` (offline evaluation)."""
    for name, (q, scale) in quantized.items():
        parent, _, child = name.rpartition(".")
        linear = model.get_submodule(name)
        setattr(
            model.get_submodule(parent), child, QuantizedLinear(q, scale, policy.bits, policy.group_size, linear.bias)
        )
    return model


def load_checkpoint(out_dir: Path, dtype: torch.dtype = torch.float32) -> Any:
    """A weight-only checkpoint in our layout (``quant export`` / GPTQ) as a HF model whose
    quantized layers compute with the serving math: the offline evaluation of served weights."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    desc = modelslim.read(out_dir) or {}
    tensors = load_file(str(Path(out_dir) / "model.safetensors"))
    quantized, policies = {}, {}
    for layer, scheme in modelslim.layer_types(desc).items():
        if scheme in ("w8a16", "w4a16"):
            tensors.pop(f"{layer}.weight_offset")
            quantized[layer] = (tensors.pop(f"{layer}.weight"), tensors.pop(f"{layer}.weight_scale"))
            policies[layer] = QuantPolicy(scheme, int(desc["group_size"]))
        elif scheme != modelslim.FLOAT:
            raise modelslim.CheckpointError(f"layer {layer}: {scheme} is not weight-only; load it with the engine")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(out_dir)), dtype=dtype).eval()
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=False)
    if unexpected or set(missing) - {f"{n}.weight" for n in quantized} - {"lm_head.weight"}:
        raise modelslim.CheckpointError(f"{out_dir}: unexpected {unexpected[:3]}, missing {missing[:3]}")
    model.tie_weights()
    for layer, (q, scale) in quantized.items():
        apply(model, {layer: (q, scale)}, policies[layer])
    return model


@dataclass(frozen=True)
class Options:
    act_order: bool = False  # columns by decreasing H_jj (static groups)
    mse: bool = False  # scale search per group (clipping), see _group_scales
    damp: float = 0.01


def quantize_layer(
    layer: Any, prefix: str, xs: list, kws: list, policy: QuantPolicy, options: Options
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """True-sequential GPTQ of one decoder layer (weights replaced by their dequantized values)."""
    out = {}
    for names in L.SEQUENTIAL:
        todo = [n for n in names if f"{prefix}.{n}" not in policy.keep]
        if not todo:
            continue
        first = layer.get_submodule(names[0])
        hessian = Hessian(first.in_features)
        L.capture(layer, first, xs, kws, hessian.add)
        for name in todo:
            linear = layer.get_submodule(name)
            q, scale = gptq(
                linear.weight,
                hessian.h,
                policy.bits,
                policy.group_size,
                damp=options.damp,
                act_order=options.act_order,
                mse=options.mse,
            )
            linear.weight.data = dequantize(q, scale, policy.group_size).to(linear.weight.dtype)
            out[f"{prefix}.{name}"] = (q, scale)
        del hessian
    return out


def calibrate(
    model_dir: Path,
    text: str,
    policy: QuantPolicy,
    *,
    tokens: int = 4096,
    window: int = 512,
    options: Options = Options(),
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """GPTQ over every decoder layer in order; returns layer -> (int8 values, scales)."""
    if policy.scheme == "w8a8_dynamic":
        raise ValueError("GPTQ here writes weight-only schemes: use --scheme w4a16 or w8a16")
    model = load_model(model_dir)
    xs, kws = L.layer_inputs(model, L.windows(token_ids(model_dir, text, tokens), window))
    result: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for i, layer in enumerate(progress(list(model.model.layers))):
        result.update(quantize_layer(layer, f"model.layers.{i}", xs, kws, policy, options))
        xs = L.run_layer(layer, xs, kws)
    return result

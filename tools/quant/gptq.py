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

Symmetric by default, like ``runtime_ext.ops.quant_ref``: ``scale = absmax / qmax`` (qmax 7 or
127), values clamped to [-8, 7] (INT4) or [-127, 127]. Asymmetric (``asym``, the reference's
``sym=False``): a zero point per group, all 2^b levels, ``[min, max]`` of the group mapped onto
them; the values are stored signed ([-8, 7] / [-128, 127]) with ``offset = 2^(b−1) − zero``, so
every weight is ``(q + offset) · scale`` (the form torch_npu's antiquant takes). The result is
stored values + scales + offsets, written by ``tools.quant.export.export(precomputed=...)``:
never a float copy.

``calibrate`` processes decoder layers in order; each layer sees the outputs of the already
quantized previous layers, and inside a layer the groups of ``layers.SEQUENTIAL`` are
quantized in forward order ("true sequential"), so o_proj's Hessian sees quantized q/k/v.
Only one Hessian (``K × K``) lives at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

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


class Quantized(NamedTuple):
    """One layer in our layout: int8 values ``q[N, K]``, float32 ``scale`` and ``offset``
    ``[N, ceil(K/G)]``; the weight is ``(q + offset) · scale`` (offset 0: symmetric)."""

    q: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor


def _levels(bits: int, asym: bool) -> tuple[int, int]:
    """The stored value range: symmetric uses ±qmax (and -8 for INT4, like the reference RTN's
    clamp), asymmetric the whole signed range (16 or 256 levels)."""
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if asym else (QMIN[bits], quant_ref.QMAX[bits])


def _grid_at(lo: torch.Tensor, hi: torch.Tensor, bits: int, asym: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, offset) mapping ``[lo, hi]`` onto the levels. Asymmetric (the reference
    ``Quantizer(sym=False)``): ``scale = (hi − lo) / (2^b − 1)``, zero ``z = round(−lo / scale)``
    on the unsigned grid, stored signed, so ``offset = 2^(b−1) − z``."""
    if not asym:
        scale = hi / quant_ref.QMAX[bits]
        return torch.where(scale > 0, scale, torch.ones_like(scale)), torch.zeros_like(scale)
    scale = (hi - lo) / (2**bits - 1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return scale, 2 ** (bits - 1) - torch.round(-lo / scale)


def _quantize(w: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, levels: tuple[int, int]) -> torch.Tensor:
    return torch.clamp(torch.round(w / scale) - offset, *levels)


def _group_grid(
    w: torch.Tensor, bits: int, group: int, mse: bool = False, asym: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, offset) per (row, group) from the group's range (absmax when symmetric, [min, max]
    through 0 when not); with ``mse`` the range shrunk by 0-79 % in 1 % steps to the least
    ``Σ|w − Q(w)|^2.4`` (the reference ``quant.py`` ``Quantizer(mse=True)``)."""
    n, k = w.shape
    groups = -(-k // group)
    padded = torch.nn.functional.pad(w, (0, groups * group - k)).reshape(n, groups, group)
    if asym:
        lo, hi = padded.amin(dim=2).clamp(max=0), padded.amax(dim=2).clamp(min=0)
    else:
        hi = padded.abs().amax(dim=2)
        lo = -hi
    best = _grid_at(lo, hi, bits, asym)
    return _shrink_search(padded, lo, hi, bits, asym, best) if mse else best


Grid = tuple[torch.Tensor, torch.Tensor]


def _shrink_search(padded: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bits: int, asym: bool, best: Grid) -> Grid:
    """The 80-step range shrink of ``_group_grid``: ``_quantize`` and the error computed in one
    buffer, in place (the same operations in the same order: the same result, half the time)."""
    levels, buf = _levels(bits, asym), torch.empty_like(padded)
    err_best = torch.full_like(best[0], float("inf"))
    for i in range(80):
        scale, offset = _grid_at(lo * (1 - i / 100), hi * (1 - i / 100), bits, asym)
        s, o = scale.unsqueeze(2), offset.unsqueeze(2)
        torch.div(padded, s, out=buf).round_().sub_(o).clamp_(*levels).add_(o)
        err = buf.mul_(s).sub_(padded).abs_().pow_(2.4).sum(dim=2)
        better = err < err_best
        best = (torch.where(better, scale, best[0]), torch.where(better, offset, best[1]))
        err_best = torch.where(better, err, err_best)
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
    asym: bool = False,
) -> Quantized:
    """``weight[N, K]``, ``h[K, K]`` -> int8 values ``[N, K]`` with float32 scale/offset ``[N, ceil(K/G)]``."""
    w = weight.detach().float().clone()
    n, k = w.shape
    perm = torch.argsort(torch.diag(h), descending=True) if act_order else torch.arange(k)
    static = _group_grid(w, bits, group, mse, asym) if act_order else None
    w, h = w[:, perm], h[perm][:, perm]
    u = _inverse_factor(h, w, damp)
    scale, offset = static if static is not None else (torch.ones(n, -(-k // group)), torch.zeros(n, -(-k // group)))
    levels, q = _levels(bits, asym), torch.zeros(n, k)
    for i1 in range(0, k, group):  # block size B = G
        i2 = min(i1 + group, k)
        block, err = w[:, i1:i2].clone(), torch.zeros(n, i2 - i1)
        if static is None:
            s, o = _group_grid(block, bits, group, mse, asym)
            scale[:, i1 // group], offset[:, i1 // group] = s[:, 0], o[:, 0]
        for i in range(i2 - i1):
            g = int(perm[i1 + i]) // group
            q[:, i1 + i] = _quantize(block[:, i], scale[:, g], offset[:, g], levels)
            err[:, i] = (block[:, i] - (q[:, i1 + i] + offset[:, g]) * scale[:, g]) / u[i1 + i, i1 + i]
            block[:, i:] -= err[:, i : i + 1] @ u[i1 + i : i1 + i + 1, i1 + i : i2]
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return Quantized(q[:, torch.argsort(perm)].to(torch.int8), scale.float(), offset.float())


def dequantize(q: torch.Tensor, scale: torch.Tensor, group: int, offset: torch.Tensor | None = None) -> torch.Tensor:
    return quant_ref.dequantize_weight_groupwise(q, scale, 8, group, torch.float32, offset)


class QuantizedLinear(torch.nn.Module):
    """Serves given stored values + scales (+ offsets) with the serving math (``weight_only_matmul``)."""

    def __init__(self, layer: Quantized, bits: int, group: int, bias: Any = None) -> None:
        super().__init__()
        packed = quant_ref.pack_int4(layer.q) if bits == 4 else layer.q
        self.prepared = quant_ref.prepare_weight_only(packed, layer.scale, bits, group, layer.offset)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = quant_ref.weight_only_matmul(x.reshape(-1, shape[-1]), self.prepared, self.bias)
        return y.reshape(*shape[:-1], y.shape[-1])


def apply(model: Any, quantized: dict[str, Quantized], policy: QuantPolicy) -> Any:
    """Replace the layers in ``quantized`` by ``QuantizedLinear`` (offline evaluation)."""
    for name, layer in quantized.items():
        parent, _, child = name.rpartition(".")
        bias = model.get_submodule(name).bias
        setattr(model.get_submodule(parent), child, QuantizedLinear(layer, policy.bits, policy.group_size, bias))
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
            q, scale = tensors.pop(f"{layer}.weight"), tensors.pop(f"{layer}.weight_scale")
            quantized[layer] = Quantized(q, scale, modelslim.OFFSET_SIGN * tensors.pop(f"{layer}.weight_offset"))
            policies[layer] = QuantPolicy(scheme, int(desc["group_size"]))
        elif scheme != modelslim.FLOAT:
            raise modelslim.CheckpointError(f"layer {layer}: {scheme} is not weight-only; load it with the engine")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(out_dir)), dtype=dtype).eval()
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=False)
    if unexpected or set(missing) - {f"{n}.weight" for n in quantized} - {"lm_head.weight"}:
        raise modelslim.CheckpointError(f"{out_dir}: unexpected {unexpected[:3]}, missing {missing[:3]}")
    model.tie_weights()
    for layer, values in quantized.items():
        apply(model, {layer: values}, policies[layer])
    return model


@dataclass(frozen=True)
class Options:
    act_order: bool = False  # columns by decreasing H_jj (static groups)
    mse: bool = False  # range search per group (clipping), see _group_grid
    asym: bool = False  # a zero point per group: (q + offset) · scale over all 2^b levels
    damp: float = 0.01


def quantize_layer(
    layer: Any, prefix: str, xs: list, kws: list, policy: QuantPolicy, options: Options
) -> dict[str, Quantized]:
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
            result = gptq(
                linear.weight,
                hessian.h,
                policy.bits,
                policy.group_size,
                damp=options.damp,
                act_order=options.act_order,
                mse=options.mse,
                asym=options.asym,
            )
            linear.weight.data = dequantize(result.q, result.scale, policy.group_size, result.offset).to(
                linear.weight.dtype
            )
            out[f"{prefix}.{name}"] = result
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
) -> dict[str, Quantized]:
    """GPTQ over every decoder layer in order; returns layer -> its ``Quantized`` values."""
    if policy.scheme == "w8a8_dynamic":
        raise ValueError("GPTQ here writes weight-only schemes: use --scheme w4a16 or w8a16")
    model = load_model(model_dir)
    xs, kws = L.layer_inputs(model, L.windows(token_ids(model_dir, text, tokens), window))
    result: dict[str, Quantized] = {}
    for i, layer in enumerate(progress(list(model.model.layers))):
        result.update(quantize_layer(layer, f"model.layers.{i}", xs, kws, policy, options))
        xs = L.run_layer(layer, xs, kws)
    return result

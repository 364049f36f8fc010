"""``structserve quant export``: write a quantized checkpoint in the msModelSlim layout
(``runtime_ext/quant/modelslim.py``) from a high-precision one, with exactly the math of
online quantization (``runtime_ext.ops.quant_ref``), so loading the export gives the same
weights as quantizing at load. Layers in ``policy.keep`` are written unchanged and described
``FLOAT``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from runtime_ext.ops import quant_ref
from runtime_ext.ops.kv_ref import unpack_int4
from runtime_ext.quant import modelslim
from runtime_ext.quant.policy import QuantPolicy, linear_layer_names


def _read(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    if not tensors:
        raise modelslim.CheckpointError(f"{model_dir} has no *.safetensors weights to export")
    return tensors


def quantized_tensors(
    layer: str, weight: torch.Tensor, policy: QuantPolicy, given: tuple[torch.Tensor, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The layer's stored tensors: RTN of ``weight``, or ``given`` (int8 values, scales) from a
    calibration such as GPTQ (``tools/quant/gptq.py``), written as they are."""
    if given is not None:
        q, scale = given
    elif policy.scheme == "w8a8_dynamic":
        q, scale = quant_ref.quantize_weight_per_channel(weight)
        scale = scale.unsqueeze(1)
    else:
        q, scale = quant_ref.quantize_weight_groupwise(weight, policy.bits, policy.group_size)
        q = unpack_int4(q) if policy.bits == 4 else q  # stored unpacked: int8 values in [-8, 7]
    return {
        f"{layer}.weight": q.contiguous(),
        f"{layer}.weight_scale": scale.float().contiguous(),
        f"{layer}.weight_offset": torch.zeros_like(scale, dtype=torch.float32),
    }


def export(
    model_dir: Path,
    out_dir: Path,
    policy: QuantPolicy,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
    precomputed: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> dict:
    """``precomputed``: layer -> (int8 values ``[N, K]``, float32 scales) already quantized
    (GPTQ); it must cover every layer the policy quantizes."""
    from safetensors.torch import save_file

    tensors = _read(model_dir)
    layers = sorted(linear_layer_names(list(tensors)) - set(policy.keep))
    missing = [layer for layer in layers if precomputed is not None and layer not in precomputed]
    if missing:
        raise modelslim.CheckpointError(f"no precomputed quantized weights for {missing[:3]} ({len(missing)} layers)")
    out: dict[str, torch.Tensor] = {n: t for n, t in tensors.items() if n.rpartition(".")[0] not in layers}
    for layer in progress(layers):
        given = precomputed[layer] if precomputed is not None else None
        out.update(quantized_tensors(layer, tensors[f"{layer}.weight"], policy, given))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    desc = modelslim.describe(
        [n for n in tensors if n.rpartition(".")[0] not in layers],
        {layer: policy.scheme for layer in layers},
        policy.group_size,
    )
    (out_dir / modelslim.DESCRIPTION).write_text(json.dumps(desc, indent=1))
    for path in Path(model_dir).iterdir():  # config, tokenizer, chat template
        if (
            path.is_file()
            and not path.name.endswith((".safetensors", ".bin", ".index.json"))
            and path.name != modelslim.DESCRIPTION
        ):
            shutil.copy2(path, out_dir / path.name)
    return {
        "quantized": len(layers),
        "kept": len(policy.keep),
        "bytes": sum(t.numel() * t.element_size() for t in out.values()),
    }

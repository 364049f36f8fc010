"""``structserve quant export``: write a quantized checkpoint in the msModelSlim layout
(``runtime_ext/quant/modelslim.py``) from a high-precision one, with exactly the math of
online quantization (``runtime_ext.ops.quant_ref``), so loading the export gives the same
weights as quantizing at load. Layers in ``policy.keep`` are written unchanged and described
``FLOAT``.

``target`` picks whose loader reads the result (``runtime_ext/quant/targets.py``): ``structserve``
(our layout), ``sglang-npu`` / ``vllm-ascend`` (exactly the tensors the upstream loader creates:
per-channel scales in the checkpoint's dtype). A scheme the target cannot load raises ``TargetError``
before anything is written.
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
from runtime_ext.quant.targets import Layout, TargetError, layout


def _read(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    if not tensors:
        raise modelslim.CheckpointError(f"{model_dir} has no *.safetensors weights to export")
    return tensors


def quantized_tensors(
    layer: str,
    weight: torch.Tensor,
    policy: QuantPolicy,
    form: Layout | None = None,
    params_dtype: torch.dtype = torch.bfloat16,
    given: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """One layer's int8 weight and scale/offset in ``form`` (default: our layout of ``policy.scheme``):
    RTN of ``weight`` (offset 0), or ``given`` (int8 values ``[N, K]``, scales, offsets: the weight is
    ``(q + offset) · scale``) from a calibration such as GPTQ (``tools/quant/gptq.py``), written as
    they are, the offset with msModelSlim's sign (``modelslim.OFFSET_SIGN``)."""
    form = form or layout("structserve", policy.scheme)
    offset = None
    if given is not None:
        q, scale, offset = given
    elif form.per_channel:
        q, scale = quant_ref.quantize_weight_per_channel(weight)
        scale = scale.unsqueeze(1)
    else:
        q, scale = quant_ref.quantize_weight_groupwise(weight, policy.bits, policy.group_size)
        q = unpack_int4(q) if form.int4_unpacked else q  # stored unpacked: int8 values in [-8, 7]
    dtype = torch.float32 if form.scale_dtype == "float32" else params_dtype
    return {
        f"{layer}.weight": q.contiguous(),
        f"{layer}.weight_scale": scale.to(dtype).contiguous(),
        f"{layer}.weight_offset": (
            torch.zeros_like(scale, dtype=dtype) if offset is None else (modelslim.OFFSET_SIGN * offset).to(dtype)
        ).contiguous(),
    }


def _params_dtype(model_dir: Path) -> torch.dtype:
    """The checkpoint's ``torch_dtype``/``dtype`` from config.json: the loaders' params_dtype under ``--dtype auto``."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise modelslim.CheckpointError(f"{model_dir}/config.json: torch_dtype {name!r} is not a float dtype")
    return dtype


def export(
    model_dir: Path,
    out_dir: Path,
    policy: QuantPolicy,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
    target: str = "structserve",
    precomputed: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None,
) -> dict:
    """``precomputed``: layer -> (int8 values ``[N, K]``, float32 scales, float32 offsets) already
    quantized (GPTQ's ``Quantized``); it must cover every layer the policy quantizes."""
    from safetensors.torch import save_file

    form = layout(target, policy.scheme)  # TargetError before anything is read or written
    if precomputed is not None and target != "structserve":
        raise TargetError(f"calibrated (GPTQ) weights are written in the structserve layout only, not {target!r}")
    params_dtype = _params_dtype(model_dir) if form.scale_dtype == "params" else torch.float32
    tensors = _read(model_dir)
    layers = sorted(linear_layer_names(list(tensors)) - set(policy.keep))
    missing = [layer for layer in layers if precomputed is not None and layer not in precomputed]
    if missing:
        raise modelslim.CheckpointError(f"no precomputed quantized weights for {missing[:3]} ({len(missing)} layers)")
    out: dict[str, torch.Tensor] = {n: t for n, t in tensors.items() if n.rpartition(".")[0] not in layers}
    for layer in progress(layers):
        given = precomputed[layer] if precomputed is not None else None
        out.update(quantized_tensors(layer, tensors[f"{layer}.weight"], policy, form, params_dtype, given))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    desc = modelslim.describe(
        [n for n in tensors if n.rpartition(".")[0] not in layers],
        {layer: policy.scheme for layer in layers},
        0 if form.per_channel else policy.group_size,
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
        "target": target,
        "type": form.type,
        "quantized": len(layers),
        "kept": len(policy.keep),
        "bytes": sum(t.numel() * t.element_size() for t in out.values()),
    }

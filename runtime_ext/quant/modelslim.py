"""The msModelSlim checkpoint layout we write and read (pure logic: no torch, no sglang).

A quantized checkpoint directory holds the usual HF files plus ``quant_model_description.json``:
a flat map ``"<tensor name>": "<type>"`` for every tensor, with ``"FLOAT"`` for tensors kept in
high precision, and the top-level keys ``model_quant_type`` and ``group_size`` (0 = per
channel). SGLang detects the file and tags the checkpoint ``quant_method = modelslim``.

Per quantized linear layer ``L`` (N = out, K = in):

| type | ``L.weight`` | ``L.weight_scale`` / ``L.weight_offset`` |
|---|---|---|
| W8A8_DYNAMIC | int8 [N, K] | float32 [N, 1] (offset 0) |
| W8A16 | int8 [N, K] | float32 [N, ceil(K/G)] (offset 0) |
| W4A16 | int8 [N, K], values in [-8, 7] (unpacked: no ``version`` key) | float32 [N, ceil(K/G)] |

Activations of W8A8_DYNAMIC are quantized per token at run time (no input tensors). Weight-only
layers may be asymmetric (GPTQ ``--asym``): a non-zero ``weight_offset`` per group, integral, and the
float weight is ``(q − weight_offset) · weight_scale``; the values then use the whole signed range
([-8, 7] / [-128, 127]). Our kernels and torch_npu's antiquant add their offset, ``(q + offset) ·
scale``, so ``offset = OFFSET_SIGN · weight_offset`` at the boundary (``tools/quant/export.py``
writes, ``runtime_ext/quant/checkpoint_method.py`` and ``tools/quant/gptq.py`` read).
"""

from __future__ import annotations

import json
from pathlib import Path

from runtime_ext.quant.policy import fused_module

DESCRIPTION = "quant_model_description.json"
TYPES = {"w8a8_dynamic": "W8A8_DYNAMIC", "w8a16": "W8A16", "w4a16": "W4A16"}
SCHEMES = {v: k for k, v in TYPES.items()}
FLOAT = "FLOAT"
SIDE_TENSORS = ("weight_scale", "weight_offset")
OFFSET_SIGN = -1  # the offset our kernels add = OFFSET_SIGN × the stored weight_offset (see above)


class CheckpointError(ValueError):
    """A quantized checkpoint that cannot be served (names the layer or file)."""


def describe(tensor_names: list[str], quantized: dict[str, str], group_size: int) -> dict:
    """The description for a checkpoint whose layers ``quantized`` (name -> scheme) are quantized."""
    desc: dict = {
        "model_quant_type": _model_type(set(quantized.values())),
        "group_size": group_size if set(quantized.values()) - {"w8a8_dynamic"} else 0,
    }
    for name in tensor_names:
        desc[name] = FLOAT
    for layer, scheme in quantized.items():
        desc[f"{layer}.weight"] = TYPES[scheme]
        for side in SIDE_TENSORS:
            desc[f"{layer}.{side}"] = TYPES[scheme]
    return desc


def _model_type(schemes: set[str]) -> str:
    return TYPES[schemes.pop()] if len(schemes) == 1 else ("MIXED" if schemes else FLOAT)


def read(model_dir: Path) -> dict | None:
    path = Path(model_dir) / DESCRIPTION
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path} is not valid JSON in UTF-8: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def layer_types(desc: dict) -> dict[str, str]:
    """Linear layer -> our scheme (or FLOAT), from the ``<layer>.weight`` entries."""
    out = {}
    for key, value in desc.items():
        if not key.endswith(".weight") or not isinstance(value, str):
            continue
        if value != FLOAT and value not in SCHEMES:
            raise CheckpointError(
                f"layer {key[:-7]} has quantization type {value!r}; supported: {', '.join(sorted(SCHEMES))}, {FLOAT}"
            )
        out[key[: -len(".weight")]] = SCHEMES.get(value, FLOAT)
    return out


def check_tensors(desc: dict, shapes: dict[str, tuple[list[int], str]], group_sizes: tuple[int, ...]) -> None:
    """Every quantized layer has its tensors with the right dtypes and shapes (``shapes``:
    name -> (shape, safetensors dtype)); every described tensor exists; the shards of a fused
    module have one type."""
    group = int(desc.get("group_size", 0) or 0)
    types = layer_types(desc)
    for layer, scheme in types.items():
        if layer + ".weight" not in shapes:
            raise CheckpointError(f"layer {layer} is described but {layer}.weight is not in the checkpoint")
        if scheme != FLOAT:
            _check_layer(layer, scheme, group, shapes, group_sizes)
    check_fused(types)


def _check_layer(layer: str, scheme: str, group: int, shapes: dict, group_sizes: tuple[int, ...]) -> None:
    missing = [f"{layer}.{t}" for t in ("weight",) + SIDE_TENSORS if f"{layer}.{t}" not in shapes]
    if missing:
        raise CheckpointError(f"layer {layer} ({TYPES[scheme]}) lacks {', '.join(missing)}")
    (n, k), dtype = shapes[f"{layer}.weight"]
    if dtype != "I8":
        raise CheckpointError(f"layer {layer}: weight must be int8 for {TYPES[scheme]}, found {dtype}")
    if scheme != "w8a8_dynamic" and group not in group_sizes:
        raise CheckpointError(f"layer {layer}: group_size {group} is not supported; valid: {list(group_sizes)}")
    want = [n, 1] if scheme == "w8a8_dynamic" else [n, -(-k // group)]
    for side in SIDE_TENSORS:
        if list(shapes[f"{layer}.{side}"][0]) != want:
            raise CheckpointError(f"layer {layer}: {side} has shape {shapes[f'{layer}.{side}'][0]}, expected {want}")


def check_fused(types: dict[str, str]) -> None:
    """Every shard of a fused module (qkv, gate_up: SGLang loads it as one layer with one scheme)
    has the same type (``types``: ``layer_types``)."""
    for layer in types:
        module, parts = fused_module(layer)
        found = {part: types.get(part, "missing") for part in parts}
        if len(set(found.values())) != 1:
            raise CheckpointError(
                f"fused module {module}: its parts must have one type, found {found}; re-export with "
                "`structserve quant export` (it keeps every shard of a fused module one of whose shards is kept)"
            )

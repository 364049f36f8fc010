"""Quantized linear layers at startup: the policy the scheduler applies, checked first.

``quantization: w8a8_dynamic | w8a16 | w4a16`` selects runtime_ext's SGLang method
``structserve_<scheme>`` (online quantization of the checkpoint's weights at load). The
layers kept in high precision are ``quant.ignore`` plus the ``layers`` of
``quant.sensitive_layers`` (a file from ``structserve quant scan``); every name must be a
linear layer of the model, else the server does not start (the error names the layer).

A checkpoint with its own ``quant_model_description.json`` (msModelSlim layout, e.g. from
``structserve quant export``) takes precedence: it is checked (types, tensors, shapes, group
size; errors name the layer) and served by ``structserve_modelslim``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path


from runtime_ext.quant import modelslim
from runtime_ext.quant.policy import ENV, GROUP_SIZES, QuantPolicy, check_keep, linear_layer_names
from runtime_ext.quant.sensitivity import load_sensitive_layers
from service.settings import Settings


def checkpoint_tensor_names(model_dir: Path) -> list[str]:
    return list(tensor_shapes(model_dir))


log = logging.getLogger(__name__)


def tensor_shapes(model_dir: Path) -> dict[str, tuple[list[int], str]]:
    from safetensors import safe_open

    shapes = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                piece = f.get_slice(name)
                shapes[name] = (piece.get_shape(), piece.get_dtype())
    return shapes


def quant_setup(settings: Settings, model_dir: Path) -> str | None:
    """The SGLang quantization name to pass (None for ``none``); sets the scheduler's policy env."""
    description = modelslim.read(model_dir)
    if description is not None:
        modelslim.check_tensors(description, tensor_shapes(model_dir), GROUP_SIZES)
        if settings.quantization != "none":
            log.warning("%s has its own %s: serving it as described (quantization=%s ignored)",
                        model_dir, modelslim.DESCRIPTION, settings.quantization)
        os.environ[ENV] = QuantPolicy("w8a8_dynamic", stage_aware=settings.quant.stage_aware).to_json()
        return "structserve_modelslim"
    if settings.quantization == "none":
        return None
    q = settings.quant
    keep = list(q.ignore)
    if q.sensitive_layers is not None:
        keep += load_sensitive_layers(q.sensitive_layers)
    check_keep(keep, linear_layer_names(checkpoint_tensor_names(model_dir)))
    policy = QuantPolicy(settings.quantization, q.group_size, q.stage_aware, tuple(keep))
    os.environ[ENV] = policy.to_json()
    return f"structserve_{settings.quantization}"

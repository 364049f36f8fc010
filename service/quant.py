"""Quantized linear layers at startup: the policy the scheduler applies, checked first.

``quantization: w8a8_dynamic | w8a16 | w4a16`` selects runtime_ext's SGLang method
``structserve_<scheme>`` (online quantization of the checkpoint's weights at load). The
layers kept in high precision are ``quant.ignore`` plus the ``layers`` of
``quant.sensitive_layers`` (a file from ``structserve quant scan``); every name must be a
linear layer of the model, else the server does not start (the error names the layer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from runtime_ext.quant.policy import ENV, QuantPolicy, check_keep, linear_layer_names
from runtime_ext.quant.sensitivity import load_sensitive_layers
from service.settings import Settings


def checkpoint_tensor_names(model_dir: Path) -> list[str]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return list(json.loads(index.read_text())["weight_map"])
    from safetensors import safe_open

    names: list[str] = []
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            names += list(f.keys())
    return names


def quant_setup(settings: Settings, model_dir: Path) -> str | None:
    """The SGLang quantization name to pass (None for ``none``); sets the scheduler's policy env."""
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

"""`structserve quant export --target sglang-npu` of SmolLM2, loaded by SGLang 0.5.23's own code on CPU.

tests/offline/modelslim_load.py (a process of its own) builds SGLang's ``LlamaForCausalLM`` with the
quantization config SGLang's loader makes from our ``quant_model_description.json`` (``ModelSlimConfig``;
its NPU packed-modules mapping), runs every ``get_quant_method`` / ``create_weights`` and
``model.load_weights`` over our safetensors (the real weight loaders, qkv_proj and gate_up_proj stacking
included), and compares every parameter with what we wrote. The NPU kernels (``apply``,
``process_weights_after_loading``) are not run. Layer 3's q/k/v are kept in bf16 (a whole fused module):
SGLang must pick ``UnquantizedLinearMethod`` for its qkv_proj. The same export is read by our own
``structserve_modelslim`` (with its ``process_weights_after_loading``), so it also serves here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KEPT = "model.layers.3.self_attn.qkv_proj"
LINEAR_MODULES = 30 * 4  # qkv, o, gate_up, down per layer


@pytest.fixture(scope="module")
def npu_export(assets, tmp_path_factory):
    from runtime_ext.quant.policy import QuantPolicy
    from tools.quant.export import export

    out = tmp_path_factory.mktemp("sglang-npu") / "smollm2-w8a8"
    keep = tuple(f"model.layers.3.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj"))
    export(assets.smollm2, out, QuantPolicy("w8a8_dynamic", keep=keep), target="sglang-npu")
    return out


def load(model_dir: Path, method: str) -> dict:
    script = Path(__file__).with_name("modelslim_load.py")
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), method], capture_output=True, text=True, timeout=600, env=env
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[0][len("REPORT ") :])


def test_sglangs_own_modelslim_loader_fills_every_parameter_with_what_we_wrote(npu_export):
    report = load(npu_export, "modelslim")
    assert report["config"] == "ModelSlimConfig"
    methods = report["methods"]
    assert len(methods) == LINEAR_MODULES and methods.pop(KEPT) == ["UnquantizedLinearMethod", None]
    assert set(map(tuple, methods.values())) == {("ModelSlimLinearMethod", "ModelSlimW8A8Int8")}
    # every parameter: exactly our tensor (fused ones: our shards stacked), its dtype and shape
    assert report["missing"] == [] and report["mismatch"] == [] and report["dtype_differs"] == []
    params = report["params"]
    assert params["model.layers.0.self_attn.qkv_proj.weight"] == ["int8", [960, 576]]
    assert params["model.layers.0.self_attn.qkv_proj.weight_scale"] == ["bfloat16", [960, 1]]
    assert params["model.layers.0.mlp.gate_up_proj.weight_offset"] == ["bfloat16", [3072, 1]]
    assert params[f"{KEPT}.weight"] == ["bfloat16", [960, 576]] and f"{KEPT}.weight_scale" not in params


def test_our_loader_reads_the_sglang_npu_export(npu_export):
    report = load(npu_export, "structserve_modelslim")
    assert report["config"] == "StructserveModelSlimConfig"
    assert report["missing"] == [] and report["mismatch"] == []
    # our parameters hold the scales in float32: the bf16 values, widened exactly
    assert {name.rpartition(".")[2] for name, _ in report["dtype_differs"]} == {"weight_scale", "weight_offset"}
    assert report["stats"]["quantized"] == LINEAR_MODULES - 1 and report["stats"]["kept"] == 1


def test_the_service_passes_the_checkpoint_as_modelslim(npu_export, monkeypatch):
    """startup checks the export and names no method of ours: the override decides (targets.serving_method)."""
    from runtime_ext.config import ENV_NAMES
    from service.settings import Settings
    from service.startup import ModelInfo, prepare_engine

    for name in ENV_NAMES:
        monkeypatch.setenv(name, "1")  # records the original value: restored after the test
        monkeypatch.delenv(name)
    assert prepare_engine(Settings(), ModelInfo.read(npu_export)).quantization == "modelslim"

"""Export targets (runtime_ext/quant/targets.py, tools/quant/export.py): the layout each target's loader
reads, the refusals, and who serves a modelslim checkpoint (on a fake NPU: no torch_npu).

The vllm-ascend layout cannot be executed here (vllm_ascend imports torch_npu and vllm at module top),
so it is checked against this table, cited from vllm-ascend v0.23.0 (commit 5cb98caa):
``vllm_ascend/quantization/methods/w8a16.py`` ``AscendW8A16LinearMethod.get_weight`` /
``get_perchannel_param`` and ``methods/w8a8_dynamic.py`` ``AscendW8A8DynamicLinearMethod`` (same two):
weight int8 [N, K]; weight_scale, weight_offset [N, 1] in params_dtype.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from runtime_ext.ops import quant_ref
from runtime_ext.quant import targets
from runtime_ext.quant.policy import QuantPolicy

N, K = 48, 80  # K = 80: a short last group at g32
VLLM_ASCEND_LINEAR = {  # tensor: (dtype, shape) per scheme, from the source cited above
    "w8a8_dynamic": {
        "weight": (torch.int8, [N, K]),
        "weight_scale": ("params", [N, 1]),
        "weight_offset": ("params", [N, 1]),
    },
    "w8a16": {"weight": (torch.int8, [N, K]), "weight_scale": ("params", [N, 1]), "weight_offset": ("params", [N, 1])},
}


@pytest.fixture
def tiny(tmp_path):
    """A two-layer float16 checkpoint (float16: the scale dtype must follow config.json, not default to bf16)."""
    g = torch.Generator().manual_seed(0)
    tensors = {
        "model.layers.0.mlp.down_proj.weight": (torch.randn(N, K, generator=g) * 0.05).half(),
        "model.layers.0.self_attn.o_proj.weight": (torch.randn(N, K, generator=g) * 0.05).half(),
        "model.norm.weight": torch.ones(K, dtype=torch.float16),
    }
    src = tmp_path / "src"
    src.mkdir()
    save_file(tensors, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    return src, tensors


@pytest.mark.parametrize("scheme", list(VLLM_ASCEND_LINEAR))
def test_vllm_ascend_export_matches_its_source_layout(tiny, tmp_path, scheme):
    from tools.quant.export import export

    src, tensors = tiny
    out = tmp_path / "out"
    export(src, out, QuantPolicy(scheme, 32), target="vllm-ascend")
    got, desc = (
        load_file(str(out / "model.safetensors")),
        json.loads((out / "quant_model_description.json").read_text()),
    )
    layer = "model.layers.0.mlp.down_proj"
    assert (
        desc[f"{layer}.weight"] == scheme.upper() and desc["group_size"] == 0 and desc["model.norm.weight"] == "FLOAT"
    )
    for name, (dtype, shape) in VLLM_ASCEND_LINEAR[scheme].items():
        t = got[f"{layer}.{name}"]
        assert (t.dtype, list(t.shape)) == (torch.float16 if dtype == "params" else dtype, shape), name
    q, scale = quant_ref.quantize_weight_per_channel(tensors[f"{layer}.weight"])
    assert torch.equal(got[f"{layer}.weight"], q)
    assert torch.equal(got[f"{layer}.weight_scale"], scale.unsqueeze(1).half())
    assert not got[f"{layer}.weight_offset"].any()


def test_structserve_target_keeps_our_layout(tiny, tmp_path):
    from tools.quant.export import export

    src, _ = tiny
    export(src, tmp_path / "out", QuantPolicy("w4a16", 32))
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    w, s = got["model.layers.0.mlp.down_proj.weight"], got["model.layers.0.mlp.down_proj.weight_scale"]
    assert (w.dtype, list(w.shape), s.dtype, list(s.shape)) == (torch.int8, [N, K], torch.float32, [N, 3])
    assert int(w.min()) >= -8 and int(w.max()) <= 7


@pytest.mark.parametrize(
    "target, scheme, says",
    [
        ("sglang-npu", "w8a16", "no W8A16 linear scheme (its linear types: W4A4_DYNAMIC, W8A8, W8A8_DYNAMIC"),
        ("sglang-npu", "w4a16", "no W4A16 linear scheme"),
        ("vllm-ascend", "w4a16", "MoE layers only"),
        ("tensorrt", "w8a16", "unknown export target 'tensorrt'; valid: structserve, sglang-npu, vllm-ascend"),
    ],
)
def test_a_scheme_the_target_cannot_load_is_refused(target, scheme, says):
    with pytest.raises(targets.TargetError, match=says.replace("(", r"\(")):
        targets.layout(target, scheme)


def test_the_cli_refuses_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from tools.cli import app

    out = tmp_path / "never"
    args = ["quant", "export", "--scheme", "w4a16", "--target", "sglang-npu", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert "cannot load w4a16" in result.output and "Of our schemes it loads: w8a8_dynamic" in result.output
    assert "Traceback" not in result.output and not out.exists()


W8, W16, W4, F = "W8A8_DYNAMIC", "W8A16", "W4A16", "FLOAT"


@pytest.mark.parametrize(
    "on_npu, types, stage_aware, user, expected",
    [
        (False, {W8, F}, False, None, targets.OURS),  # CPU: ours always
        (False, {W8}, False, "modelslim", targets.OURS),
        (True, {W8, F}, False, None, targets.MODELSLIM),  # NPU, a type SGLang loads: upstream
        (True, {W8, F}, False, "modelslim", targets.MODELSLIM),
        (True, {W8, W16}, False, None, targets.OURS),  # W8A16: SGLang has no scheme
        (True, {W4, F}, False, None, targets.OURS),
        (True, {W8}, True, None, targets.OURS),  # stage-aware decode copy: ours only
        (True, {W8}, False, targets.OURS, targets.OURS),  # asked for by name
    ],
)
def test_serving_method(on_npu, types, stage_aware, user, expected):
    assert targets.serving_method(on_npu, types, stage_aware, user) == expected


def test_the_override_asks_serving_method_with_the_device(monkeypatch):
    import sglang.srt.utils

    from runtime_ext.quant.checkpoint_method import StructserveModelSlimConfig

    desc = {"quant_method": "modelslim", "model_quant_type": W8, "a.q_proj.weight": W8, "a.norm.weight": F}
    for on_npu, expected in ((False, targets.OURS), (True, targets.MODELSLIM)):
        monkeypatch.setattr(sglang.srt.utils, "is_npu", lambda: on_npu)
        assert StructserveModelSlimConfig.override_quantization_method(desc, "modelslim") == expected
    assert (
        StructserveModelSlimConfig.override_quantization_method({**desc, "a.k_proj.weight": W4}, None)
        == "structserve_modelslim"
    )
    assert StructserveModelSlimConfig.override_quantization_method(desc, "w8a8_int8") is None
    assert StructserveModelSlimConfig.override_quantization_method({"quant_method": "gptq"}, None) is None

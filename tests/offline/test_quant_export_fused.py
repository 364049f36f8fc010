"""`structserve quant export --sensitive-layers` with a list that names only some shards of fused
modules (a scan file written before the fallback list was closed): the export keeps every shard
of those fused modules, its description passes the startup checks, and our modelslim config gives
each real SGLang fused layer one method. A partial description (what export wrote before) is refused
by both, naming the fused module."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from runtime_ext.quant import modelslim
from runtime_ext.quant.policy import FUSED, GROUP_SIZES
from service.startup import ModelInfo
from tools.cli import app

PARTIAL = ["model.layers.0.self_attn.q_proj", "model.layers.3.mlp.up_proj", "model.layers.5.mlp.down_proj"]
KEPT = {  # SGLang module prefix -> kept in high precision?
    "model.layers.0.self_attn.qkv_proj": True,
    "model.layers.1.self_attn.qkv_proj": False,
    "model.layers.3.mlp.gate_up_proj": True,
    "model.layers.0.mlp.gate_up_proj": False,
    "model.layers.5.mlp.down_proj": True,
}


@pytest.fixture(scope="module")
def export(assets, tmp_path_factory):
    scan = tmp_path_factory.mktemp("scan") / "old.json"
    scan.write_text(json.dumps({"format": "structserve-sensitive-layers/1", "layers": PARTIAL}))
    out = tmp_path_factory.mktemp("export") / "smol-w8a8"
    args = ["quant", "export", "--model", str(assets.smollm2), "--scheme", "w8a8_dynamic", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--sensitive-layers", str(scan)])
    assert result.exit_code == 0, result.output
    return out


def test_the_export_keeps_whole_fused_modules(export):
    desc = json.loads((export / modelslim.DESCRIPTION).read_text())
    types = modelslim.layer_types(desc)
    for prefix, kept in KEPT.items():
        head, _, last = prefix.rpartition(".")
        for shard in FUSED.get(last, (last,)):
            assert types[f"{head}.{shard}"] == ("FLOAT" if kept else "w8a8_dynamic"), shard
    assert sum(t == "FLOAT" for name, t in types.items() if name.endswith("_proj")) == 3 + 2 + 1
    modelslim.check_tensors(desc, ModelInfo.read(export).tensors, GROUP_SIZES)  # what startup checks
    partial = {**desc, "model.layers.1.self_attn.q_proj.weight": "FLOAT"}  # k, v stay W8A8_DYNAMIC
    with pytest.raises(modelslim.CheckpointError, match="fused module model.layers.1.self_attn.qkv_proj"):
        modelslim.check_tensors(partial, ModelInfo.read(export).tensors, GROUP_SIZES)


def layer(prefix: str, config):
    """The real SGLang linear module SmolLM2 builds for ``prefix`` (hidden 576, 9 q / 3 kv heads of 64)."""
    from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear

    kw = {"bias": False, "params_dtype": torch.float32, "quant_config": config, "prefix": prefix}
    if prefix.endswith("qkv_proj"):
        return QKVParallelLinear(576, 64, 9, 3, parallel_group="replicated", **kw)
    if prefix.endswith("gate_up_proj"):
        return MergedColumnParallelLinear(576, [1536, 1536], parallel_group="replicated", **kw)
    return RowParallelLinear(1536, 576, parallel_group="replicated", **kw)


def test_our_modelslim_config_gives_each_fused_layer_one_method(export):
    from service.engine import prepare_process_env

    prepare_process_env("cpu")
    from runtime_ext.quant.checkpoint_method import CheckpointLinearMethod, StructserveModelSlimConfig
    from runtime_ext.quant.sglang_methods import KeptLinearMethod
    from runtime_ext.state import QuantStats

    config_cls = type("Config", (StructserveModelSlimConfig,), {"quant_stats": QuantStats()})
    desc = json.loads((export / modelslim.DESCRIPTION).read_text())
    for prefix, kept in KEPT.items():
        method = layer(prefix, config_cls.from_config(desc)).quant_method
        assert type(method) is (KeptLinearMethod if kept else CheckpointLinearMethod), prefix
    partial = {**desc, "model.layers.1.self_attn.q_proj.weight": "FLOAT"}
    with pytest.raises(modelslim.CheckpointError, match="model.layers.1.self_attn.qkv_proj: its parts"):
        layer("model.layers.1.self_attn.qkv_proj", config_cls.from_config(partial))


def test_the_offline_fake_quantized_model_keeps_what_serving_keeps(assets):
    from runtime_ext.quant.policy import QuantPolicy
    from tools.quant.offline import linear_layers, load_model, quantize_model

    a = "model.layers.0.self_attn"
    model = quantize_model(load_model(assets.qwen3_tiny), QuantPolicy("w8a8_dynamic", keep=(f"{a}.q_proj",)))
    assert set(linear_layers(model)) == {f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj"}  # the rest fake-quantized

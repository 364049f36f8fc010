"""Startup checks of the quantization settings against the real SmolLM2 checkpoint: the
policy handed to the scheduler, and clear errors naming what to change."""

from __future__ import annotations

import json

import pytest

from runtime_ext.config import ENV_NAMES, RuntimeExtConfig
from runtime_ext.quant.policy import QuantPolicy, QuantPolicyError, keep_reasons
from runtime_ext.quant.sensitivity import SensitiveLayersError, write
from service.settings import Settings
from service.startup import ModelInfo, prepare_engine


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch):
    for name in ENV_NAMES:
        monkeypatch.setenv(name, "1")  # records the original value: restored after the test
        monkeypatch.delenv(name)


def quant_setup(settings, model_dir):
    """The quantization method startup passes to the engine (the policy goes to the scheduler's env)."""
    return prepare_engine(settings, ModelInfo.read(model_dir)).quantization


def test_none_passes_nothing(assets):
    assert quant_setup(Settings(), assets.smollm2) is None and RuntimeExtConfig.from_env().quant_policy is None


def test_the_policy_reaches_the_scheduler_env(assets, tmp_path):
    scan = tmp_path / "s.json"
    write(scan, "smollm2", "w8a8_dynamic", {}, {"model.layers.3.mlp.down_proj": "KL"}, {})
    settings = Settings(
        quantization="w8a8_dynamic",
        quant={"stage_aware": True, "sensitive_layers": scan, "ignore": ["model.layers.0.self_attn.q_proj"]},
    )
    assert quant_setup(settings, assets.smollm2) == "structserve_w8a8_dynamic"
    assert RuntimeExtConfig.from_env().quant_policy == QuantPolicy(
        "w8a8_dynamic", 128, True, ("model.layers.0.self_attn.q_proj", "model.layers.3.mlp.down_proj")
    )
    assert RuntimeExtConfig.from_env().quant_policy.keep == (  # the closure over fused modules, in the env
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.k_proj",
        "model.layers.0.self_attn.v_proj",
        "model.layers.3.mlp.down_proj",
    )


def test_bad_settings_fail_at_startup_naming_the_problem(assets, tmp_path):
    with pytest.raises(QuantPolicyError, match="model.layers.99.mlp.up_proj"):
        quant_setup(Settings(quantization="w4a16", quant={"ignore": ["model.layers.99.mlp.up_proj"]}), assets.smollm2)
    with pytest.raises(QuantPolicyError, match="group size 100"):
        quant_setup(Settings(quantization="w4a16", quant={"group_size": 100}), assets.smollm2)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"layers": ["x"]}))
    with pytest.raises(SensitiveLayersError, match="quant scan"):
        quant_setup(Settings(quantization="w8a16", quant={"sensitive_layers": bad}), assets.smollm2)


def test_the_monitor_gets_a_standby_plan_by_the_scan_ranking_within_its_budget(assets, tmp_path):
    scan = tmp_path / "s.json"
    down7, o2 = "model.layers.7.mlp.down_proj", "model.layers.2.self_attn.o_proj"
    scores = {down7: {"kl": 0.9, "dispersion": 1.0, "energy": 0.1}, o2: {"kl": 0.5, "dispersion": 1.0, "energy": 0.1}}
    write(scan, "smollm2", "w8a8_dynamic", scores, keep_reasons({"model.layers.5.self_attn.k_proj": "KL"}), {})
    budget = 576 * 1536 * 2 + 576 * 576 * 2  # down_proj 7 and o_proj 2 in bf16, exactly
    settings = Settings(
        quantization="w8a8_dynamic",
        quant={"sensitive_layers": scan, "monitor": {"enabled": True, "max_fallback_bytes": budget}},
    )
    quant_setup(settings, assets.smollm2)
    monitor = RuntimeExtConfig.from_env().quant_monitor
    assert monitor.standby == ("model.layers.5.self_attn.qkv_proj", down7, o2)  # kept, then by KL
    assert monitor.sensitive_layers == str(scan.resolve())
    settings.quant.monitor.max_fallback_bytes = budget - 1
    quant_setup(settings, assets.smollm2)
    assert RuntimeExtConfig.from_env().quant_monitor.standby == ("model.layers.5.self_attn.qkv_proj", down7)


def test_the_monitor_refuses_what_it_cannot_do(assets):
    from runtime_ext.quant.monitor import MonitorConfigError

    with pytest.raises(MonitorConfigError, match="needs online quantization"):
        quant_setup(Settings(quant={"monitor": {"enabled": True}}), assets.smollm2)
    settings = Settings(quantization="w8a16", quant={"monitor": {"enabled": True, "granularity": "request"}})
    quant_setup(settings, assets.smollm2)
    assert RuntimeExtConfig.from_env().quant_monitor.granularity == "request"

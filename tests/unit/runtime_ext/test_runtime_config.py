"""``RuntimeExtConfig``, the one channel to the scheduler processes: every knob survives the
trip through the environment, and writing it clears what an earlier config left behind."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from runtime_ext.config import ENV_NAMES, RuntimeExtConfig
from runtime_ext.quant.monitor import MonitorConfig
from runtime_ext.quant.policy import QuantPolicy

EVERY_KNOB_SET = RuntimeExtConfig(
    kv_calibration=Path("/models/kv.json"),
    quant_policy=QuantPolicy("w4a16", 64, True, ("model.layers.0.mlp.up_proj",)),
    combine_blocks=7,
    prefix_events=Path("/tmp/prefix-events.jsonl"),
    attention="sglang",
    quant_monitor=MonitorConfig(
        enabled=True, sigma=3.0, max_fallback_bytes=1 << 20, sensitive_layers="/s.json", events_path="/e.jsonl"
    ),
    kv_rotation="k",
    admission="budget",
    reserve_ratio=0.625,
    kv_kernels="reference",
    fast_forward=True,
    decode_kernels="reference",
)


def test_every_field_round_trips_through_the_environment():
    defaults = RuntimeExtConfig()
    unset = [f.name for f in fields(RuntimeExtConfig) if getattr(EVERY_KNOB_SET, f.name) == getattr(defaults, f.name)]
    assert not unset, f"give these fields a non-default value here: {unset}"
    env = EVERY_KNOB_SET.to_env()
    assert set(env) <= set(ENV_NAMES)
    assert RuntimeExtConfig.from_env(env) == EVERY_KNOB_SET


def test_an_unknown_kv_rotation_is_refused_by_name():
    import pytest

    from runtime_ext.config import RuntimeConfigError

    with pytest.raises(RuntimeConfigError, match="STRUCTSERVE_KV_ROTATION='q'; valid: auto, none, k, kv"):
        RuntimeExtConfig.from_env({"STRUCTSERVE_KV_ROTATION": "q"})


def test_an_unknown_attention_is_refused_and_per_request_round_trips():
    import pytest

    from runtime_ext.config import RuntimeConfigError

    with pytest.raises(
        RuntimeConfigError, match="STRUCTSERVE_ATTENTION='batched'; valid: structserve, per_request, sglang"
    ):
        RuntimeExtConfig.from_env({"STRUCTSERVE_ATTENTION": "batched"})
    per_request = RuntimeExtConfig(attention="per_request")
    assert RuntimeExtConfig.from_env(per_request.to_env()) == per_request


def test_auto_rotation_is_kv_for_per_token_scales_and_none_for_static_ones():
    from runtime_ext.config import resolve_rotation

    assert resolve_rotation("auto", "c8_dynamic") == "kv"
    assert resolve_rotation("auto", "c8_static") == resolve_rotation("auto", "c8_static_residual") == "none"
    assert resolve_rotation("k", "c8_static") == "k" and resolve_rotation("none", "c8_dynamic") == "none"


def test_export_writes_the_config_and_clears_unset_knobs():
    environ = {"PATH": "/bin"}
    EVERY_KNOB_SET.export(environ)
    assert RuntimeExtConfig.from_env(environ) == EVERY_KNOB_SET
    RuntimeExtConfig().export(environ)
    assert RuntimeExtConfig.from_env(environ) == RuntimeExtConfig() and environ["PATH"] == "/bin"
    assert RuntimeExtConfig.from_env({}) == RuntimeExtConfig()  # nothing set: the defaults


def test_an_unknown_admission_policy_is_refused_by_name():
    import pytest

    from runtime_ext.config import RuntimeConfigError

    with pytest.raises(RuntimeConfigError, match="STRUCTSERVE_RUNTIME_ADMISSION='fifo'; valid: sglang, budget"):
        RuntimeExtConfig.from_env({"STRUCTSERVE_RUNTIME_ADMISSION": "fifo"})

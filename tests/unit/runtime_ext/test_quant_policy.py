"""The one fused-module rule (``policy.fused_closure`` / ``keep_reasons``) and its consumers'
pure parts: ``QuantPolicy.keep``, the scan's fallback list and file, the checkpoint check."""

from __future__ import annotations

import json

import pytest

from runtime_ext.quant import modelslim, sensitivity
from runtime_ext.quant import policy as qp

A = "model.layers.2.self_attn"
M = "model.layers.2.mlp"


def test_the_closure_adds_every_shard_of_a_listed_fused_module():
    assert qp.fused_module(f"{A}.k_proj") == (f"{A}.qkv_proj", [f"{A}.q_proj", f"{A}.k_proj", f"{A}.v_proj"])
    assert qp.fused_module(f"{M}.down_proj") == (f"{M}.down_proj", [f"{M}.down_proj"])
    assert qp.fused_closure([f"{M}.up_proj", f"{A}.o_proj", f"{A}.v_proj", f"{A}.q_proj"]) == (
        f"{M}.gate_proj",
        f"{M}.up_proj",
        f"{A}.o_proj",
        f"{A}.q_proj",
        f"{A}.k_proj",
        f"{A}.v_proj",
    )
    policy = qp.QuantPolicy("w8a8_dynamic", keep=(f"{A}.k_proj",))
    assert policy.keep == (f"{A}.q_proj", f"{A}.k_proj", f"{A}.v_proj")  # every consumer sees the closure
    assert qp.QuantPolicy.from_json(policy.to_json()) == policy == qp.QuantPolicy("w8a8_dynamic", keep=policy.keep)


def test_reasons_name_the_flagged_shard():
    reasons = qp.keep_reasons({f"{A}.q_proj": "KL 7.1e-02 ≥ 0.05", f"{M}.down_proj": "R 63.0 ≥ 50"})
    assert reasons == {
        f"{A}.q_proj": "KL 7.1e-02 ≥ 0.05",
        f"{A}.k_proj": "fused with q_proj in qkv_proj; q_proj flagged (KL 7.1e-02 ≥ 0.05)",
        f"{A}.v_proj": "fused with q_proj in qkv_proj; q_proj flagged (KL 7.1e-02 ≥ 0.05)",
        f"{M}.down_proj": "R 63.0 ≥ 50",
    }
    both = qp.keep_reasons({f"{M}.gate_proj": "a", f"{M}.up_proj": "b"})
    assert both == {f"{M}.gate_proj": "a", f"{M}.up_proj": "b"}


def scores(**kl):
    return {f"{A}.{name}": {"kl": value, "dispersion": 5.0, "energy": 0.1} for name, value in kl.items()}


def test_the_scan_file_lists_fused_modules_whole_with_reasons(tmp_path):
    s = scores(q_proj=0.07, k_proj=0.001, v_proj=0.002, o_proj=0.003)
    reasons = sensitivity.fallback(s, {**sensitivity.THRESHOLDS, "kl_top": 0})
    assert list(reasons) == [f"{A}.q_proj", f"{A}.k_proj", f"{A}.v_proj"]
    assert reasons[f"{A}.v_proj"] == "fused with q_proj in qkv_proj; q_proj flagged (KL 7.0e-02 ≥ 0.05)"
    path = tmp_path / "s.json"
    sensitivity.write(path, "m", "w8a8_dynamic", s, reasons, sensitivity.THRESHOLDS)
    data = json.loads(path.read_text())
    assert data["layers"] == list(reasons) and data["reasons"] == reasons
    assert sensitivity.load_sensitive_layers(path) == list(reasons)
    table = sensitivity.markdown(s, reasons)
    assert f"| {A}.k_proj | 1.00e-03 | 5.0 | 0.1000 | fused with q_proj in qkv_proj;" in table
    assert f"| {A}.o_proj | 3.00e-03 | 5.0 | 0.1000 |  |\n" in table  # quantized: no reason
    with pytest.raises(sensitivity.SensitiveLayersError, match="every shard"):
        sensitivity.write(path, "m", "w8a8_dynamic", s, {f"{A}.q_proj": "KL"}, {})


def test_an_old_scan_file_is_closed_on_load(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": sensitivity.FORMAT, "layers": [f"{M}.up_proj", f"{A}.o_proj"]}))
    assert sensitivity.load_sensitive_layers(path) == [f"{M}.gate_proj", f"{M}.up_proj", f"{A}.o_proj"]


def test_a_checkpoint_with_a_partial_fused_module_is_refused_naming_it():
    types = {f"{A}.q_proj": "FLOAT", f"{A}.k_proj": "w8a8_dynamic", f"{A}.v_proj": "w8a8_dynamic"}
    with pytest.raises(modelslim.CheckpointError, match=rf"fused module {A}.qkv_proj: .*'q_proj'|{A}.q_proj"):
        modelslim.check_fused(types)
    with pytest.raises(modelslim.CheckpointError, match="missing"):
        modelslim.check_fused({f"{A}.q_proj": "FLOAT", f"{A}.k_proj": "FLOAT"})
    modelslim.check_fused({**types, f"{A}.q_proj": "w8a8_dynamic", f"{A}.o_proj": "FLOAT"})

"""Files the scheduler reads while serving, fed bytes an operator (or a broken editor) can leave
behind: every one is a typed error naming the file, never an exception that escapes into
SGLang's scheduler. The sensitive-layers file is re-read by the quant monitor before a forward
(a bad file keeps the live set and counts ``reload_errors``); the KV calibration file is read when
the scheduler loads; the msModelSlim description when the service reads the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from runtime_ext.kv_cache.calibration import FORMAT as KV_FORMAT
from runtime_ext.kv_cache.calibration import CalibrationMismatchError, load_raw_calibration
from runtime_ext.quant import modelslim
from runtime_ext.quant.fallback import FallbackController
from runtime_ext.quant.monitor import MonitorConfig, read_events
from runtime_ext.quant.sensitivity import FORMAT, SensitiveLayersError, load_scores, load_sensitive_layers

A, B = (f"model.layers.{i}.mlp.down_proj" for i in range(2))
NOT_UTF8 = b'{"format": "' + FORMAT.encode() + b'", "layers": ["\xff\xfe"]}'
GOOD = {"format": FORMAT, "layers": [A]}


def bad_files(tmp_path: Path) -> dict[str, Path]:
    """Each way a sensitive-layers file can be unusable, as a path."""
    files = {
        "not utf-8": NOT_UTF8,
        "truncated": json.dumps(GOOD)[:-7].encode(),
        "layers not a list": json.dumps({"format": FORMAT, "layers": A}).encode(),
        "a layer not a string": json.dumps({"format": FORMAT, "layers": [A, 7]}).encode(),
        "a null layer": json.dumps({"format": FORMAT, "layers": [None]}).encode(),
        "a list, not an object": json.dumps([A]).encode(),
        "nested past the recursion limit": b"[" * 100_000 + b"]" * 100_000,
    }
    tmp_path.mkdir()
    paths = {}
    for what, data in files.items():
        paths[what] = tmp_path / f"{len(paths)}.json"
        paths[what].write_bytes(data)
    paths["a directory"] = tmp_path / "dir.json"
    paths["a directory"].mkdir()
    paths["missing"] = tmp_path / "missing.json"
    return paths


def test_every_bad_sensitive_layers_file_is_a_sensitive_layers_error(tmp_path):
    for what, path in bad_files(tmp_path / "bad").items():
        with pytest.raises(SensitiveLayersError, match=path.name):
            load_sensitive_layers(path)


def test_scores_of_the_wrong_type_are_refused_by_name(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**GOOD, "scores": {A: {"kl": "high", "dispersion": 1, "energy": 0.1}}}))
    with pytest.raises(SensitiveLayersError, match=f"scores\\['{A}'\\] must hold numbers kl"):
        load_scores(path)
    path.write_text(json.dumps({**GOOD, "scores": {A: 0.3}}))
    with pytest.raises(SensitiveLayersError, match="must hold numbers"):
        load_scores(path)
    path.write_bytes(NOT_UTF8)
    with pytest.raises(SensitiveLayersError, match="cannot read"):
        load_scores(path)


def controller(tmp_path: Path) -> FallbackController:
    scan = tmp_path / "s.json"
    scan.write_text(json.dumps(GOOD))
    config = MonitorConfig(
        enabled=True,
        reload_interval_s=3600,
        standby=(A, B),
        sensitive_layers=str(scan),
        events_path=str(tmp_path / "events.jsonl"),
    )
    ctl = FallbackController(config)
    for name in (A, B):
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(torch.randn(4, 8))
        ctl.attach(module, name, starts_high=name == A)
    return ctl


def test_a_reload_of_any_bad_file_keeps_the_live_set_and_counts_each(tmp_path):
    ctl = controller(tmp_path)
    scan = Path(ctl.config.sensitive_layers)
    assert ctl.live() == {A}
    bad = bad_files(tmp_path / "bad")
    for n, (what, path) in enumerate(bad.items(), start=1):
        remove(scan)
        if path.is_dir():
            scan.mkdir()
        elif path.exists():
            scan.write_bytes(path.read_bytes())
        ctl.maybe_reload(force=True)  # what runs before a forward in the scheduler: must not raise
        assert ctl.live() == {A} and ctl.counters["reload_errors"] == n, what
        ctl.maybe_reload(force=True)  # the same bad state is reported once
        assert ctl.counters["reload_errors"] == n, what
    remove(scan)
    scan.write_text(json.dumps({"format": FORMAT, "layers": [B]}))
    ctl.maybe_reload(force=True)
    assert ctl.live() == {B} and ctl.counters["reloads"] == 1  # a good file after them all still reloads
    events, torn = read_events(Path(ctl.config.events_path).read_text().splitlines())
    assert torn == 0 and [e["kind"] for e in events] == ["reload_error"] * len(bad) + ["reload"]


def remove(path: Path) -> None:
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


def calibration(**change: object) -> dict:
    scales = [[[0.5, 0.25]]]  # [layers=1][kv_heads=1][head_dim=2]
    data = dict(format=KV_FORMAT, model="m", layers=1, kv_heads=1, head_dim=2, k_scale=scales, v_scale=scales)
    return data | dict(tau=1.0, eps_mean=0.1, eps_p99=0.2, outlier_rate=0.0, tokens=10) | change


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"format": "structserve-kv-c8/1", "model": "\xff"}', "cannot read"),
        (json.dumps(calibration())[:-3].encode(), "cannot read"),
        (json.dumps(calibration(extra=1)).encode(), "missing or unknown fields"),
        (json.dumps({k: v for k, v in calibration().items() if k != "tau"}).encode(), "missing or unknown fields"),
        (json.dumps(calibration(layers="1")).encode(), "must be integers"),
        (json.dumps(calibration(tau=None)).encode(), "must be integers"),
        (json.dumps(calibration(k_scale=[[[0.5]]])).encode(), "k_scale is not \\[1, 1, 2\\] numbers"),
        (json.dumps(calibration(v_scale=[[["x", 1]]])).encode(), "v_scale is not"),
    ],
)
def test_a_bad_kv_calibration_file_is_a_calibration_error(tmp_path, data, message):
    path = tmp_path / "kv.json"
    path.write_bytes(data)
    with pytest.raises(CalibrationMismatchError, match=message):
        load_raw_calibration(path)


def test_a_good_kv_calibration_file_loads(tmp_path):
    path = tmp_path / "kv.json"
    path.write_text(json.dumps(calibration()))
    assert load_raw_calibration(path).k_scale == [[[0.5, 0.25]]]


def test_a_non_utf8_modelslim_description_is_a_checkpoint_error(tmp_path):
    (tmp_path / modelslim.DESCRIPTION).write_bytes(b'{"model_quant_type": "\xff"}')
    with pytest.raises(modelslim.CheckpointError, match="not valid JSON in UTF-8"):
        modelslim.read(tmp_path)

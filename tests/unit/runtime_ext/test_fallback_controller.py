"""``FallbackController`` on plain torch modules (no engine): device-side statistics read once
per step, the switch to the standby copy, hot reload of the sensitive-layers file (a bad file
keeps the live set), the events it records, and per-request granularity (only the tripping
request's rows take the standby weight)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from runtime_ext.quant.fallback import FallbackController
from runtime_ext.quant.monitor import MonitorConfig, read_events
from runtime_ext.quant.sensitivity import FORMAT

A, B, C = (f"model.layers.{i}.mlp.down_proj" for i in range(3))


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)  # the calm inputs are noisy: a fixed draw, not a 1-in-50 flake


def layer() -> torch.nn.Module:
    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(torch.randn(4, 8))
    return module


def scan_file(path: Path, layers: list[str]) -> None:
    path.write_text(json.dumps({"format": FORMAT, "layers": layers}))


def controller(tmp_path: Path, **kw) -> tuple[FallbackController, dict]:
    config = MonitorConfig(
        enabled=True,
        window_requests=1000,
        min_window_tokens=64,
        warmup_tokens=64,
        reload_interval_s=3600,
        standby=(A, B),
        sensitive_layers=str(tmp_path / "s.json"),
        events_path=str(tmp_path / "events.jsonl"),
        **kw,
    )
    scan_file(tmp_path / "s.json", [B])
    ctl = FallbackController(config)
    layers = {A: layer(), B: layer(), C: layer()}
    kept = {name: ctl.attach(module, name, starts_high=name == B) for name, module in layers.items()}
    assert kept == {A: True, B: True, C: False}  # the standby plan, not the caller, decides
    return ctl, layers


def run_step(ctl: FallbackController, layers: dict, x_by_layer: dict, rids=("r1",)) -> None:
    for name, x in x_by_layer.items():
        ctl.observe(layers[name], x)
    ctl.step_end(SimpleNamespace(rids=list(rids)))


def test_outliers_switch_only_the_layer_that_has_them(tmp_path):
    ctl, layers = controller(tmp_path)
    assert ctl.live() == {B}  # kept by the policy: starts on its standby copy
    calm = torch.ones(128, 8) + 0.01 * torch.randn(128, 8)
    run_step(ctl, layers, {A: calm, C: calm})  # warm-up: 128 tokens of statistics each
    assert ctl.live() == {B}
    spiky = calm.clone()
    spiky[::10] *= 50  # 13 of 128 tokens far above mean + 4σ: ~10 % > 1 %
    run_step(ctl, layers, {A: spiky, C: calm})
    assert ctl.live() == {A, B}
    assert ctl.monitor.layers[A].window_outliers == 13 and ctl.monitor.layers[C].window_outliers == 0
    events, _ = read_events((tmp_path / "events.jsonl").read_text().splitlines())
    [fallback] = [e for e in events if e["kind"] == "fallback"]
    assert fallback["module"] == A and fallback["serving_from_step"] == 3 and fallback["rate"] > 0.05


def test_a_layer_without_standby_is_reported_not_switched(tmp_path):
    ctl, layers = controller(tmp_path)
    calm = torch.ones(128, 8)
    run_step(ctl, layers, {C: calm + 0.01 * torch.randn(128, 8)})
    run_step(ctl, layers, {C: calm * 100})
    assert C not in ctl.live() and C in ctl.unswitchable
    assert ctl.report()["layers"][C] == {"rate": 0.5, "state": "int8"}


def test_reload_moves_layers_both_ways_and_a_bad_file_keeps_the_live_set(tmp_path):
    ctl, layers = controller(tmp_path)
    scan_file(tmp_path / "s.json", [A])
    ctl.maybe_reload(force=True)
    assert ctl.live() == {A} and ctl.counters["reloads"] == 1 and ctl.counters["to_int8"] == 1
    (tmp_path / "s.json").write_text("{not json")
    ctl.maybe_reload(force=True)
    assert ctl.live() == {A} and ctl.counters["reload_errors"] == 1
    ctl.maybe_reload(force=True)  # the same bad file: reported once
    assert ctl.counters["reload_errors"] == 1
    kinds = [e["kind"] for e in read_events((tmp_path / "events.jsonl").read_text().splitlines())[0]]
    assert kinds == ["reload", "reload_error"]


def test_reload_waits_for_its_interval(tmp_path):
    ctl, _ = controller(tmp_path)
    scan_file(tmp_path / "s.json", [A])
    ctl.maybe_reload()  # not due for an hour
    assert ctl.live() == {B} and ctl.counters["reloads"] == 0


def test_new_requests_are_counted_once_per_window(tmp_path):
    ctl, layers = controller(tmp_path)
    x = torch.ones(4, 8)
    for _ in range(3):
        run_step(ctl, layers, {A: x}, rids=("r1", "r2"))
    assert ctl.monitor.window_requests_seen == 2


class Mode:
    def __init__(self, extend: bool) -> None:
        self.extend = extend

    def is_extend(self) -> bool:
        return self.extend


def request_step(ctl, module, x, rids, lens, extend=True):
    batch = SimpleNamespace(rids=list(rids), extend_seq_lens_cpu=list(lens), forward_mode=Mode(extend))
    ctl.begin_step(batch)
    ctl.observe(module, x)
    mask = ctl.row_mask(x.shape[0])
    ctl.step_end(batch)
    return mask


def test_per_request_only_the_tripping_request_goes_high_precision(tmp_path):
    ctl, layers = controller(tmp_path, granularity="request", min_request_tokens=16)
    calm = torch.ones(64, 8) + 0.01 * torch.randn(64, 8)
    assert request_step(ctl, layers[A], calm, ["warm"], [64]) is None  # warm-up statistics
    spiky = torch.ones(32, 8) + 0.01 * torch.randn(32, 8)
    spiky[16:24] *= 50  # 8 of request b's 16 prefill rows
    assert request_step(ctl, layers[A], spiky, ["a", "b"], [16, 16]) is None  # flagged after this step
    assert list(ctl.requests.flagged) == ["b"] and ctl.live() == {B}  # no layer switched
    decode = torch.ones(3, 8)
    mask = request_step(ctl, layers[A], decode, ["a", "b", "c"], [], extend=False)
    assert mask.tolist() == [False, True, False]  # b's row only
    event = [e for e in read_events((tmp_path / "events.jsonl").read_text().splitlines())[0] if e["kind"] == "fallback"]
    assert event[0]["granularity"] == "request" and event[0]["request"] == "b" and event[0]["module"] == A


def test_mixed_rows_replace_only_the_masked_rows():
    from runtime_ext.quant.request_rows import mixed_rows

    x, w = torch.randn(4, 8), torch.randn(3, 8)
    quantized = torch.zeros(4, 3)
    y = mixed_rows(quantized.clone(), x, w, None, torch.tensor([False, True, False, True]))
    assert torch.equal(y[[0, 2]], quantized[[0, 2]]) and torch.allclose(y[[1, 3]], x[[1, 3]] @ w.T)

"""The online monitor's pure logic (``runtime_ext.quant.monitor``): running statistics, the
decision rule, windows, the standby plan, reload diffing, events and their folding into the scan."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from runtime_ext.quant import sensitivity
from runtime_ext.quant.monitor import (
    LayerMonitor,
    Monitor,
    MonitorConfig,
    MonitorConfigError,
    RequestTally,
    StepStats,
    decide,
    decide_request,
    event_line,
    modules_listed,
    read_events,
    reload_diff,
    standby_plan,
)

QKV, O = "model.layers.3.self_attn.qkv_proj", "model.layers.3.self_attn.o_proj"
CONFIG = MonitorConfig(enabled=True, sigma=4.0, rate_threshold=0.01, window_requests=3, min_window_tokens=100)


def step(values: list[float], threshold: float = math.inf) -> StepStats:
    return StepStats(len(values), sum(values), sum(v * v for v in values), sum(v > threshold for v in values))


def test_batched_updates_give_the_statistics_of_all_tokens():
    rng = random.Random(0)
    data = [rng.gauss(5.0, 2.0) for _ in range(1000)]
    layer = LayerMonitor()
    for start in range(0, 1000, 137):  # uneven batches, as scheduler steps are
        layer.add(step(data[start : start + 137]))
    assert layer.count == 1000
    assert layer.mean == pytest.approx(statistics.fmean(data), rel=1e-12)
    assert layer.std() == pytest.approx(statistics.stdev(data), rel=1e-9)


def test_threshold_is_infinite_until_warm_then_mean_plus_sigma_std():
    layer = LayerMonitor()
    layer.add(step([1.0, 3.0] * 10))
    assert layer.threshold(4.0, warmup_tokens=21) == math.inf
    assert layer.threshold(4.0, warmup_tokens=20) == pytest.approx(2.0 + 4.0 * statistics.stdev([1.0, 3.0] * 10))


def test_decide_needs_enough_tokens_and_a_rate_above_the_threshold():
    calm, noisy, young = LayerMonitor(), LayerMonitor(), LayerMonitor()
    calm.add(StepStats(1000, 1000.0, 1000.0, 10))  # exactly 1 %: not above
    noisy.add(StepStats(1000, 1000.0, 1000.0, 11))
    young.add(StepStats(99, 99.0, 99.0, 99))  # all outliers, but under min_window_tokens
    layers = {"calm": calm, "noisy": noisy, "young": young}
    assert decide(layers, CONFIG) == ["noisy"]
    assert decide(layers, CONFIG, falling=["noisy"]) == []


def test_a_window_closes_after_window_requests_and_resets_the_counts_not_the_statistics():
    monitor = Monitor(CONFIG)
    monitor.add_step({QKV: StepStats(500, 500.0, 600.0, 7)})
    assert not monitor.count_requests(2)
    assert monitor.count_requests(1) and monitor.windows_closed == 1
    layer = monitor.layers[QKV]
    assert (layer.window_tokens, layer.window_outliers, layer.count) == (0, 0, 500)


def test_standby_plan_keeps_every_kept_module_and_fills_the_budget_by_rank():
    sizes = {"a": 100, "b": 300, "c": 200, "d": 50}
    chosen, kept_bytes, extra = standby_plan(sizes, kept=["b"], ranking=["c", "a", "d", "b"], budget=260)
    assert chosen == ("b", "c", "d") and kept_bytes == 300 and extra == 250  # a (100) no longer fits


def test_sensitive_layer_names_map_to_fused_modules():
    listed = modules_listed(["model.layers.3.self_attn.k_proj"], [QKV, O])
    assert listed == {QKV}


def test_reload_diff_keeps_monitor_switches_and_skips_modules_without_standby():
    to_fallback, to_int8, unswitchable = reload_diff(
        from_file={"a", "b"}, by_monitor={"m"}, wanted={"b", "c", "m", "x"}, switchable={"a", "b", "c", "m"}
    )
    assert (to_fallback, to_int8, unswitchable) == (["c"], ["a"], ["x"])


def test_a_request_trips_on_its_worst_module_after_enough_tokens():
    config = MonitorConfig(granularity="request", rate_threshold=0.05, min_request_tokens=40)
    tally = RequestTally()
    tally.add(20, {QKV: 5, O: 1})
    assert decide_request(tally, config) is None  # 20 tokens < 40
    tally.add(20, {O: 1})
    assert decide_request(tally, config) == (QKV, 5 / 40)
    calm = RequestTally()
    calm.add(100, {QKV: 5})
    assert decide_request(calm, config) is None  # exactly 5 %: not above


def test_bad_settings_name_their_key():
    with pytest.raises(MonitorConfigError, match="use 'layer' or 'request'"):
        MonitorConfig(granularity="token")  # type: ignore[arg-type]
    with pytest.raises(MonitorConfigError, match="quant.monitor.sigma"):
        MonitorConfig(sigma=0)


def test_events_round_trip_and_fold_into_the_scan_closed_over_fused_modules():
    shards = [f"model.layers.3.self_attn.{p}_proj" for p in "qkv"]
    lines = [
        event_line("fallback", "t1", module=QKV, layers=shards, rate=0.031, window_tokens=4096),
        "{torn",
        event_line("reload", "t2", path="/s.json"),
    ]
    events, bad = read_events(lines)
    assert [e["kind"] for e in events] == ["fallback", "reload"] and bad == 1
    scores = {
        name: {"kl": 0.001, "dispersion": 1.0, "energy": 0.1}
        for name in [*shards, "model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"]
    }
    thresholds = {**sensitivity.THRESHOLDS, "kl_top": 0.0}
    assert sensitivity.fallback(scores, thresholds) == {}
    folded = sensitivity.fallback(scores, thresholds, events)
    assert (
        list(folded) == shards
        and "online fallback ×1: outlier rate 3.1% over 4096 tokens, last t1" in folded[shards[0]]
    )
    assert json.loads(lines[0])["kind"] == "fallback"

"""``kv_cache`` modes on ``engine.device: npu``: every mode wired into SGLang's NPU pool loads (C8-D and
C8-S through runtime_ext's C8NPUMHATokenToKVPool; tests/npu_twin/twin_c8_attention.py runs it), and a
mode that is not (``runtime_ext/kv_cache/support.py`` SERVED: C8-S + residual, whose host syncs NPU graph
capture cannot hold) is a startup error naming the setting, never a silent fallback to another KV format."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime_ext.kv_cache import support
from runtime_ext.kv_cache.sizing import KV_MODES
from service.settings import load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("STRUCTSERVE_"):
            monkeypatch.delenv(key)


@pytest.fixture
def npu_serves_bf16_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build in which no C8 mode is wired into the NPU pool."""
    monkeypatch.setitem(support.SERVED, "npu", ("bf16",))


@pytest.mark.parametrize("mode", [m for m in KV_MODES if m != "bf16"])
def test_a_mode_not_wired_on_npu_is_refused_naming_the_setting(npu_serves_bf16_only, mode: str) -> None:
    with pytest.raises(ValidationError) as err:
        load_settings(kv_cache=mode, engine={"device": "npu"})
    assert f"kv_cache: {mode} is not supported on device: npu yet" in str(err.value)
    assert "kv_cache: bf16" in str(err.value)  # what to use instead


def test_a_mode_not_wired_from_the_environment_is_refused(npu_serves_bf16_only, monkeypatch) -> None:
    monkeypatch.setenv("STRUCTSERVE_ENGINE__DEVICE", "npu")
    monkeypatch.setenv("STRUCTSERVE_KV_CACHE", "c8_dynamic")
    with pytest.raises(ValidationError, match="kv_cache: c8_dynamic is not supported on device: npu yet"):
        load_settings()


def test_c8_static_residual_on_npu_is_refused_naming_the_setting_and_why() -> None:
    with pytest.raises(ValidationError) as err:
        load_settings(kv_cache="c8_static_residual", engine={"device": "npu"})
    assert "kv_cache: c8_static_residual is not supported on device: npu yet" in str(err.value)
    assert "graph capture" in str(err.value) and "kv_cache: bf16 or c8_dynamic or c8_static" in str(err.value)


SERVED = [("npu", "bf16"), ("npu", "c8_dynamic"), ("npu", "c8_static")] + [("cpu", m) for m in KV_MODES]


@pytest.mark.parametrize(("device", "mode"), SERVED)
def test_served_combinations_load(device: str, mode: str) -> None:
    settings = load_settings(kv_cache=mode, engine={"device": device})
    assert (settings.engine.device, settings.kv_cache) == (device, mode)


@pytest.mark.parametrize("pd_mode", ["prefill", "decode"])
@pytest.mark.parametrize("mode", [m for m in KV_MODES if m != "bf16"])
def test_a_c8_cache_on_a_pd_replica_is_refused_naming_both_settings(mode: str, pd_mode: str) -> None:
    """The KV transfer moves the pool's K/V buffers only, not the C8 scales: refused, never served."""
    with pytest.raises(ValidationError) as err:
        load_settings(kv_cache=mode, engine={"disaggregation": {"mode": pd_mode}})
    assert f"kv_cache: {mode} is not supported with engine.disaggregation.mode: {pd_mode}" in str(err.value)
    assert "Use kv_cache: bf16" in str(err.value)


def test_bf16_on_a_pd_replica_and_c8_without_pd_load() -> None:
    assert load_settings(kv_cache="bf16", engine={"disaggregation": {"mode": "decode"}}).kv_cache == "bf16"
    assert load_settings(kv_cache="c8_dynamic").engine.disaggregation.mode is None

"""A C8 ``kv_cache`` on ``engine.device: npu`` is a startup error naming the setting: SGLang's NPU pool
would store K/V truncated to int8 (runtime_ext/kv_cache/support.py; the twin shows it,
tests/npu_twin/twin_kv_pool.py). bf16 on npu and every mode on cpu still load."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime_ext.kv_cache.sizing import KV_MODES
from service.settings import load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("STRUCTSERVE_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize("mode", [m for m in KV_MODES if m != "bf16"])
def test_c8_on_npu_is_refused_naming_the_setting(mode: str) -> None:
    with pytest.raises(ValidationError) as err:
        load_settings(kv_cache=mode, engine={"device": "npu"})
    assert f"kv_cache: {mode} is not supported on device: npu yet" in str(err.value)
    assert "kv_cache: bf16" in str(err.value)  # what to use instead


def test_c8_on_npu_from_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRUCTSERVE_ENGINE__DEVICE", "npu")
    monkeypatch.setenv("STRUCTSERVE_KV_CACHE", "c8_dynamic")
    with pytest.raises(ValidationError, match="kv_cache: c8_dynamic is not supported on device: npu yet"):
        load_settings()


@pytest.mark.parametrize(("device", "mode"), [("npu", "bf16")] + [("cpu", m) for m in KV_MODES])
def test_served_combinations_load(device: str, mode: str) -> None:
    settings = load_settings(kv_cache=mode, engine={"device": device})
    assert (settings.engine.device, settings.kv_cache) == (device, mode)

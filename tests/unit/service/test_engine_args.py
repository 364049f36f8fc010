"""engine_args: the sglang_args pass-through checked against SGLang's own ServerArgs, the
parallelism settings, the CPU per-rank thread binding."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from service.engine_args import (
    OWNED,
    EngineOptions,
    checked_sglang_args,
    cpu_thread_binding,
    prepare_process_env,
    start_method,
    use_start_method,
)
from service.settings import EngineSettings


def test_known_fields_pass_with_their_declared_types() -> None:
    args = {"schedule_policy": "lpm", "mem_fraction_static": 0.5, "enable_metrics": True, "stream_interval": 2}
    assert checked_sglang_args(args) == args


def test_unknown_field_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"engine.sglang_args.tp_sizee: not a field of SGLang's ServerArgs"):
        checked_sglang_args({"tp_sizee": 2})


@pytest.mark.parametrize("name", ["tp_size", "kv_cache_dtype", "model_path", "port", "chunked_prefill_size"])
def test_owned_field_names_the_setting_to_use(name: str) -> None:
    with pytest.raises(ValueError, match=rf"engine.sglang_args.{name}: set by structserve; use {OWNED[name]}"):
        checked_sglang_args({name: 1})


def test_wrong_type_and_wrong_choice_are_refused() -> None:
    with pytest.raises(ValueError, match=r"engine.sglang_args.stream_interval: 'many' is not a"):
        checked_sglang_args({"stream_interval": "many"})
    with pytest.raises(ValueError, match=r"engine.sglang_args.schedule_policy: 'fastest' is not one of \["):
        checked_sglang_args({"schedule_policy": "fastest"})


def test_every_owned_name_is_a_real_server_args_field() -> None:
    from sglang.srt.server_args import ServerArgs, record_fields

    fields = {f.name for f in record_fields(ServerArgs)}
    assert set(OWNED) <= fields, set(OWNED) - fields


def test_engine_kwargs_carry_parallelism_and_the_pass_through(tmp_path) -> None:
    engine = EngineSettings(dp_size=2, sglang_args={"schedule_policy": "lpm"})
    kwargs = EngineOptions(model_path=tmp_path, engine=engine).engine_kwargs()
    assert (kwargs["tp_size"], kwargs["dp_size"], kwargs["schedule_policy"]) == (1, 2, "lpm")
    assert set(EngineOptions(model_path=tmp_path).engine_kwargs()) <= set(OWNED)  # everything we set is owned


def test_tensor_parallel_on_cpu_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="engine.tp_size > 1 cannot run on device: cpu"):
        EngineSettings(tp_size=2)
    assert EngineSettings(device="npu", tp_size=2, dp_size=2, devices=[4, 5, 6, 7]).devices == [4, 5, 6, 7]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"devices": [0, 1]}, "engine.devices applies to device: npu only"),
        ({"device": "npu", "tp_size": 2, "devices": [0]}, "must list 2 distinct NPU ids"),
        ({"device": "npu", "tp_size": 2, "devices": [3, 3]}, "must list 2 distinct NPU ids"),
    ],
)
def test_device_list_must_match_the_ranks(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EngineSettings(**fields)


def test_cpu_binding_splits_the_cores_evenly() -> None:
    assert cpu_thread_binding([0, 1], 2) == "0|1"
    assert cpu_thread_binding([3, 0, 1, 2], 2) == "0-1|2-3"
    assert cpu_thread_binding([0, 2, 4, 6], 1) == "0,2,4,6"
    with pytest.raises(ValueError, match="3 ranks need at least 3 CPU cores"):
        cpu_thread_binding([0, 1], 3)


def test_process_env_sets_binding_and_devices_only_when_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.environ", dict(os.environ))  # what prepare_process_env sets stays in this test
    for name in ("SGLANG_CPU_OMP_THREADS_BIND", "ASCEND_RT_VISIBLE_DEVICES", "SGLANG_USE_CPU_ENGINE"):
        os.environ.pop(name, None)
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1})
    prepare_process_env("cpu", EngineSettings())
    assert "SGLANG_CPU_OMP_THREADS_BIND" not in os.environ
    prepare_process_env("cpu", EngineSettings(dp_size=2))
    assert os.environ["SGLANG_CPU_OMP_THREADS_BIND"] == "0|1"
    prepare_process_env("npu", EngineSettings(device="npu", dp_size=2, devices=[6, 7]))
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "6,7"


@pytest.mark.parametrize(
    ("device", "setting", "method"),
    [("cpu", "auto", "fork"), ("npu", "auto", "spawn"), ("cpu", "spawn", "spawn"), ("npu", "fork", "fork")],
)
def test_start_method_forks_on_cpu_and_spawns_on_devices_unless_set(device: str, setting: str, method: str) -> None:
    assert start_method(device, setting) == method


def test_the_start_method_is_set_again_after_sglang_forces_spawn() -> None:
    import multiprocessing

    from sglang.srt.entrypoints import engine as sglang_engine

    original = sglang_engine._set_envs_and_config
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        sglang_engine._set_envs_and_config = lambda args: multiprocessing.set_start_method("spawn", force=True)
        use_start_method("fork")
        use_start_method("fork")  # twice: wraps SGLang's function once
        sglang_engine._set_envs_and_config(None)
        assert multiprocessing.get_start_method() == "fork"
        assert sglang_engine._set_envs_and_config.__wrapped__.__name__ == "<lambda>"
    finally:
        sglang_engine._set_envs_and_config = original
        multiprocessing.set_start_method(before, force=True)

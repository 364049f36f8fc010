"""engine.disaggregation: the settings reach SGLang's disaggregation arguments (values SGLang's
own ServerArgs accepts), the KV address reaches SGLANG_HOST_IP, and nothing changes when off."""

from __future__ import annotations

import os
import typing

import pytest
from pydantic import ValidationError

from service.engine_args import EngineOptions, _declared, prepare_process_env
from service.settings import DisaggregationSettings, EngineSettings


def _server_args_choices(name: str) -> tuple[object, ...]:
    """What SGLang's ServerArgs field accepts: its CLI choices, or its Literal's values."""
    from sglang.srt.server_args import ServerArgs, record_fields

    field = next(f for f in record_fields(ServerArgs) if f.name == name)
    kind, choices = _declared(field.type)
    return tuple(choices or typing.get_args(kind))


def test_prefill_mode_passes_sglang_its_disaggregation_arguments(tmp_path) -> None:
    pd = DisaggregationSettings(mode="prefill", bootstrap_port=9123)
    kwargs = EngineOptions(model_path=tmp_path, engine=EngineSettings(disaggregation=pd)).engine_kwargs()
    assert kwargs["disaggregation_mode"] == "prefill"
    assert kwargs["disaggregation_transfer_backend"] == "mooncake_tcp"
    assert kwargs["disaggregation_bootstrap_port"] == 9123
    assert kwargs["disaggregation_mode"] in _server_args_choices("disaggregation_mode")
    assert kwargs["disaggregation_transfer_backend"] in _server_args_choices("disaggregation_transfer_backend")


def test_a_cpu_decode_keeps_retracted_kv_in_cpu_tensors(tmp_path) -> None:
    """SGLang's inferred host_pool backup registers host memory with CUDA; cpu_tensor does not."""
    pd = DisaggregationSettings(mode="decode")
    kwargs = EngineOptions(model_path=tmp_path, engine=EngineSettings(disaggregation=pd)).engine_kwargs()
    assert kwargs["disaggregation_decode_retraction_backup"] == "cpu_tensor"
    assert "cpu_tensor" in _server_args_choices("disaggregation_decode_retraction_backup")
    npu = EngineSettings(device="npu", disaggregation=pd)
    assert (
        "disaggregation_decode_retraction_backup" not in EngineOptions(model_path=tmp_path, engine=npu).engine_kwargs()
    )


def test_no_mode_passes_no_disaggregation_argument(tmp_path) -> None:
    kwargs = EngineOptions(model_path=tmp_path).engine_kwargs()
    assert not [k for k in kwargs if k.startswith("disaggregation")]


def test_unknown_mode_is_refused_at_startup() -> None:
    with pytest.raises(ValidationError, match="mode"):
        EngineSettings.model_validate({"disaggregation": {"mode": "both"}})


def test_host_ip_reaches_sglang_host_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.environ", dict(os.environ))  # what prepare_process_env sets stays in this test
    os.environ.pop("SGLANG_HOST_IP", None)
    prepare_process_env("cpu", EngineSettings())
    assert "SGLANG_HOST_IP" not in os.environ
    prepare_process_env(
        "cpu", EngineSettings(disaggregation=DisaggregationSettings(mode="decode", host_ip="127.0.0.1"))
    )
    assert os.environ["SGLANG_HOST_IP"] == "127.0.0.1"

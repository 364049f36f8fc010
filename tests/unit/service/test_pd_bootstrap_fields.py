"""The bootstrap_* fields SGLang's gateway adds in PD mode: accepted and carried to the engine
call by a prefill/decode replica (chat, completions, Responses), refused by name elsewhere."""

from __future__ import annotations

import pytest

from service.engine import _bootstrap_args
from service.errors import InvalidRequestError, UnsupportedParameterError
from service.fronts.responses.convert_request import to_chat_request
from service.pipeline.plan import make_plan
from service.pipeline.validate import validate_completion, validate_request
from service.protocol.completions import CompletionRequest
from service.protocol.openai import ChatCompletionRequest
from service.protocol.responses import ResponsesRequest
from service.types.plan import Bootstrap, PromptIds
from service.types.serving import ServingLimits

PD = {"bootstrap_host": "10.0.0.7", "bootstrap_port": 8998, "bootstrap_room": 2**62 + 5}


def limits(mode: str | None) -> ServingLimits:
    return ServingLimits("m", context_length=100, max_n=4, default_max_tokens=None, disaggregation=mode)


def chat(**kw: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


def completion(**kw: object) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "hi", **kw})


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_a_pd_replica_carries_the_transfer_to_the_engine_call(mode: str) -> None:
    validated = validate_request(chat(**PD), limits(mode))
    assert validated.bootstrap == Bootstrap("10.0.0.7", 8998, 2**62 + 5)
    plan = make_plan(validated, PromptIds((1, 2, 3)), limits(mode))
    assert _bootstrap_args(plan) == PD
    assert validate_completion(completion(**PD), limits(mode)).bootstrap == validated.bootstrap


def test_a_whole_request_server_refuses_each_field_by_name() -> None:
    for name, value in PD.items():
        for check in (
            lambda: validate_request(chat(**{name: value}), limits(None)),
            lambda: validate_completion(completion(**{name: value}), limits(None)),
        ):
            with pytest.raises(UnsupportedParameterError) as err:
                check()
            assert err.value.param == name and err.value.status == 400 and "remove" in err.value.message
    plan = make_plan(validate_request(chat(), limits(None)), PromptIds((1,)), limits(None))
    assert _bootstrap_args(plan) == {}


def test_a_pd_replica_needs_all_three_fields_and_one_transfer() -> None:
    with pytest.raises(InvalidRequestError) as err:
        validate_request(chat(bootstrap_host="h", bootstrap_port=1), limits("decode"))
    assert err.value.param == "bootstrap_room" and "PD gateway" in err.value.message
    with pytest.raises(UnsupportedParameterError) as err:
        validate_request(chat(n=2, **PD), limits("decode"))
    assert err.value.param == "n"
    with pytest.raises(UnsupportedParameterError) as err:
        validate_completion(completion(prompt=["a", "b"], **PD), limits("prefill"))
    assert err.value.param == "prompt"
    assert validate_completion(completion(prompt=[1, 2, 3], **PD), limits("prefill")).bootstrap is not None


def test_out_of_range_values_are_refused_by_the_protocol() -> None:
    for name, value in (
        ("bootstrap_port", 0),
        ("bootstrap_room", -1),
        ("bootstrap_room", 2**63),
        ("bootstrap_port", "1"),
    ):
        with pytest.raises(ValueError, match=name):
            chat(**{**PD, name: value})


def test_responses_pass_the_fields_to_the_chat_request() -> None:
    converted, params = to_chat_request(ResponsesRequest.model_validate({"model": "m", "input": "hi", **PD}))
    assert (converted.bootstrap_host, converted.bootstrap_port, converted.bootstrap_room) == tuple(PD.values())
    assert params.to_front("bootstrap_room") == "bootstrap_room"

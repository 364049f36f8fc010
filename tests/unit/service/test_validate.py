import pytest

from service.errors import InvalidRequestError, ModelNotFoundError, UnsupportedParameterError
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=100, max_n=4, default_max_tokens=None)


def req(**kw):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body.update(kw)
    return ChatCompletionRequest.model_validate(body)


def test_minimal_request_defaults():
    v = validate_request(req(), LIMITS)
    assert v.max_tokens is None and v.n == 1 and not v.stream and not v.include_usage
    assert v.sampling.temperature == 1.0 and v.sampling.top_p == 1.0 and v.sampling.stop == ()
    assert [(m.role, m.content) for m in v.messages] == [("user", "hi")]


def test_unknown_model_names_model_param():
    with pytest.raises(ModelNotFoundError) as err:
        validate_request(req(model="gpt-4"), LIMITS)
    assert err.value.param == "model" and "'m'" in err.value.message


def test_empty_messages():
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(messages=[]), LIMITS)
    assert err.value.param == "messages"


def test_only_system_messages_rejected():
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(messages=[{"role": "system", "content": "x"}]), LIMITS)
    assert err.value.param == "messages"


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [0, -5])
def test_non_positive_max_tokens(field, value):
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(**{field: value}), LIMITS)
    assert err.value.param == field


def test_conflicting_max_tokens():
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(max_tokens=5, max_completion_tokens=6), LIMITS)
    assert err.value.param == "max_completion_tokens"
    v = validate_request(req(max_tokens=5, max_completion_tokens=5), LIMITS)
    assert v.max_tokens == 5


def test_stop_normalised_and_bounded():
    assert validate_request(req(stop="x"), LIMITS).sampling.stop == ("x",)
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(stop=["a", "b", "c", "d", "e"]), LIMITS)
    assert err.value.param == "stop"
    with pytest.raises(InvalidRequestError):
        validate_request(req(stop=[""]), LIMITS)


@pytest.mark.parametrize("n", [0, 5])
def test_n_out_of_range(n):
    with pytest.raises(UnsupportedParameterError) as err:
        validate_request(req(n=n), LIMITS)
    assert err.value.param == "n" and "between 1 and 4" in err.value.message


def test_tool_message_needs_id_and_developer_maps_to_system():
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(messages=[{"role": "user", "content": "a"}, {"role": "tool", "content": "r"}]), LIMITS)
    assert err.value.param == "messages.1.tool_call_id"
    v = validate_request(
        req(messages=[{"role": "developer", "content": "be brief"}, {"role": "user", "content": "a"}]), LIMITS
    )
    assert v.messages[0].role == "system"


def test_text_parts_joined_and_missing_content_rejected():
    v = validate_request(
        req(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]),
        LIMITS,
    )
    assert v.messages[0].content == "ab"
    with pytest.raises(InvalidRequestError) as err:
        validate_request(req(messages=[{"role": "user", "content": None}]), LIMITS)
    assert err.value.param == "messages.0.content"


def test_stream_options_include_usage():
    v = validate_request(req(stream=True, stream_options={"include_usage": True}), LIMITS)
    assert v.stream and v.include_usage

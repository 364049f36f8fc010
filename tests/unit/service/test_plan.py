import pytest

from service.errors import ContextLengthError
from service.pipeline.plan import make_plan
from service.types import Message, PromptIds, SamplingOptions, ServingLimits, ValidatedRequest


def vreq(max_tokens=None, param="max_tokens"):
    return ValidatedRequest(
        model="m",
        messages=(Message("user", "x"),),
        sampling=SamplingOptions(),
        max_tokens=max_tokens,
        max_tokens_param=param,
        n=1,
        stream=False,
        include_usage=False,
    )


def limits(ctx=100, default=None):
    return ServingLimits(served_model_name="m", context_length=ctx, max_n=1, default_max_tokens=default)


def test_unset_max_tokens_fills_the_context():
    plan = make_plan(vreq(), PromptIds(tuple(range(30))), limits())
    assert plan.max_new_tokens == 70 and plan.input_ids == tuple(range(30))


def test_default_max_tokens_caps_unset_requests_only():
    assert make_plan(vreq(), PromptIds((1,) * 30), limits(default=16)).max_new_tokens == 16
    assert make_plan(vreq(50), PromptIds((1,) * 30), limits(default=16)).max_new_tokens == 50


def test_exact_fit_is_allowed_one_more_is_not():
    assert make_plan(vreq(70), PromptIds((1,) * 30), limits()).max_new_tokens == 70
    with pytest.raises(ContextLengthError) as err:
        make_plan(vreq(71, "max_completion_tokens"), PromptIds((1,) * 30), limits())
    assert err.value.param == "max_completion_tokens"
    assert "at most 70" in err.value.message


def test_prompt_filling_the_context_names_messages():
    with pytest.raises(ContextLengthError) as err:
        make_plan(vreq(), PromptIds((1,) * 100), limits())
    assert err.value.param == "messages" and err.value.code == "context_length_exceeded"

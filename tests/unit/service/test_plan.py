import pytest

from service.errors import ContextLengthError
from service.pipeline.plan import make_plan
from service.types.plan import PromptIds, SamplingOptions
from service.types.request import Message, ValidatedRequest
from service.types.serving import ServingLimits


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


def limits(ctx=100, default=None, pool=None):
    return ServingLimits(served_model_name="m", context_length=ctx, max_n=1, default_max_tokens=default, kv_pool=pool)


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


def test_a_pool_smaller_than_the_context_bounds_max_tokens_and_names_the_largest_that_fits():
    """SGLang would shorten max_tokens silently to what the pool holds: a 400 naming the field.
    Pool of 112 tokens in pages of 8, prompt 30 (4 pages): 112 - 32 - 8 - 1 = 71 tokens."""
    pool = (112, 8)
    assert make_plan(vreq(), PromptIds((1,) * 30), limits(ctx=200, pool=pool)).max_new_tokens == 71  # unset: fits
    assert make_plan(vreq(71), PromptIds((1,) * 30), limits(ctx=200, pool=pool)).max_new_tokens == 71
    with pytest.raises(ContextLengthError) as err:
        make_plan(vreq(72), PromptIds((1,) * 30), limits(ctx=200, pool=pool))
    assert err.value.param == "max_tokens" and "at most 71" in err.value.message and "KV pool" in err.value.message
    with pytest.raises(ContextLengthError, match="KV pool") as err:
        make_plan(vreq(), PromptIds((1,) * 104), limits(ctx=200, pool=pool))
    assert err.value.param == "messages"


def test_a_pool_larger_than_the_context_leaves_the_context_limit():
    with pytest.raises(ContextLengthError, match="this model's context"):
        make_plan(vreq(71), PromptIds((1,) * 30), limits(pool=(4096, 16)))

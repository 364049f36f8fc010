"""Thinking on/off, effort and budget validation (pure)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.errors import InvalidRequestError
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ReasoningPolicy, ServingLimits

POLICY = ReasoningPolicy(default_thinking=True, effort_budgets=(("low", 256), ("max", None)))


def validated(policy=POLICY, **kw):
    limits = ServingLimits("m", context_length=4096, max_n=1, default_max_tokens=None, reasoning=policy)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    return validate_request(ChatCompletionRequest.model_validate(body), limits)


def test_defaults_and_switches():
    assert validated().reasoning.thinking is True and validated().reasoning.budget is None
    assert validated(enable_thinking=False).reasoning.thinking is False
    assert validated(chat_template_kwargs={"enable_thinking": False, "x": 1}).template_kwargs == (("x", 1),)
    assert validated(reasoning_effort="none").reasoning.thinking is False
    assert validated(reasoning_effort="low").reasoning.budget == 256
    assert validated(reasoning_effort="max").reasoning.budget is None
    assert validated(max_thinking_tokens=7).reasoning.budget == 7
    off = ReasoningPolicy(default_thinking=False, effort_budgets=())
    assert validated(off).reasoning.thinking is False
    assert validated(off, reasoning_effort="low").reasoning.thinking is True  # effort turns it on
    assert validated(None).reasoning is None


@pytest.mark.parametrize(
    "kw, param",
    [
        ({"max_reasoning_tokens": -1}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": 10, "max_tokens": 10}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": 3, "enable_thinking": False}, "max_reasoning_tokens"),
        ({"max_reasoning_tokens": 3, "reasoning_effort": "low"}, "max_reasoning_tokens"),
        ({"reasoning_effort": "low", "enable_thinking": False}, "reasoning_effort"),
        ({"enable_thinking": True, "chat_template_kwargs": {"enable_thinking": False}}, "enable_thinking"),
        ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "chat_template_kwargs.enable_thinking"),
    ],
)
def test_invalid_combinations_name_the_field(kw, param):
    with pytest.raises(InvalidRequestError) as err:
        validated(**kw)
    assert err.value.param == param


def test_no_reasoning_format_refuses_thinking_and_budgets_must_be_integers():
    with pytest.raises(InvalidRequestError, match="no reasoning format"):
        validated(None, enable_thinking=True)
    assert validated(None, enable_thinking=False).reasoning is None
    for bad in (1.5, "10", True):
        with pytest.raises(ValidationError):
            validated(max_reasoning_tokens=bad)


# reasoning_effort is a hint: its budget is clamped to what max_tokens leaves for an answer
# (the forced end marker + at least max_tokens // 8 answer tokens); an explicit budget that
# does not fit stays a 400.
MARKERS = 3  # "\n</think>\n\n" on Qwen3
POLICY_ALL = ReasoningPolicy(
    default_thinking=False, effort_budgets=(("minimal", 64), ("low", 256), ("high", 4096), ("max", None))
)


def planned(prompt_len=10, context=4096, **kw):
    from runtime_ext.formats.reasoning_formats import QWEN3
    from service.pipeline.plan import make_plan
    from service.types.plan import PromptIds
    from service.types.serving import ModelFormats, ReasoningSetup

    limits = ServingLimits("m", context_length=context, max_n=1, default_max_tokens=None, reasoning=POLICY_ALL)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    setup = ReasoningSetup(QWEN3, end_id=1, forced_ids=(2, 3, 4), separator_ids=(5,))
    request = validate_request(ChatCompletionRequest.model_validate(body), limits, ModelFormats(reasoning=setup))
    return make_plan(request, PromptIds((7,) * prompt_len), limits)


@pytest.mark.parametrize(
    "effort, max_tokens, budget",
    [
        ("high", 100, 100 - MARKERS - 12),  # 4096 does not fit: clamped, the answer keeps 100 // 8
        ("low", 100, 85),
        ("minimal", 80, 64),  # fits (80 - 3 - 10 = 67 >= 64): unchanged
        ("low", 1000, 256),
        ("high", 8, 4),  # 8 - 3 - 1
        ("high", 3, 0),  # nothing left for reasoning: the markers, then the answer
        ("high", 1, 0),
    ],
)
def test_effort_budget_is_clamped_to_leave_an_answer(effort, max_tokens, budget):
    plan = planned(reasoning_effort=effort, max_tokens=max_tokens)
    assert plan.reasoning.budget == budget and plan.max_new_tokens == max_tokens


def test_effort_clamp_uses_the_context_room_when_max_tokens_is_unset():
    plan = planned(prompt_len=4000, reasoning_effort="high")  # 96 tokens of room
    assert plan.max_new_tokens == 96 and plan.reasoning.budget == 96 - MARKERS - 12
    assert planned(reasoning_effort="max", max_tokens=50).reasoning.budget is None  # max: no budget


def test_explicit_budget_that_does_not_fit_is_still_a_400():
    from service.errors import ContextLengthError

    with pytest.raises(InvalidRequestError) as err:
        planned(enable_thinking=True, max_reasoning_tokens=4096, max_tokens=100)
    assert err.value.param == "max_reasoning_tokens" and err.value.status == 400
    with pytest.raises(ContextLengthError) as err:  # max_tokens unset: the context room bounds it
        planned(prompt_len=4000, enable_thinking=True, max_reasoning_tokens=200)
    assert err.value.param == "max_reasoning_tokens"
    assert planned(enable_thinking=True, max_reasoning_tokens=99, max_tokens=100).reasoning.budget == 99

"""Thinking on/off, effort and budget validation (pure)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.errors import InvalidRequestError
from service.pipeline.types import ReasoningPolicy, ServingLimits
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest

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


@pytest.mark.parametrize("kw, param", [
    ({"max_reasoning_tokens": -1}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": 10, "max_tokens": 10}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": 3, "enable_thinking": False}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": 3, "reasoning_effort": "low"}, "max_reasoning_tokens"),
    ({"reasoning_effort": "low", "enable_thinking": False}, "reasoning_effort"),
    ({"enable_thinking": True, "chat_template_kwargs": {"enable_thinking": False}}, "enable_thinking"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "chat_template_kwargs.enable_thinking"),
])
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

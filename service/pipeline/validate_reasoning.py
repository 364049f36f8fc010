"""Validate stage, reasoning part (used by ``validate.py`` only): thinking on/off, ``reasoning_effort`` and the exact
budget -> ``ReasoningRequest``, or a 400 naming the field.

Fields: ``enable_thinking`` (top level) and ``chat_template_kwargs.enable_thinking``
(must agree), ``reasoning_effort`` (``none`` = thinking off; the others map to budgets
in config ``reasoning.effort_budgets``), ``max_reasoning_tokens`` (alias
``max_thinking_tokens``; with ``reasoning_effort`` too it is an error). An effort or a
budget turns thinking on unless the request turns it off (then it is an error).
``max_tokens`` covers reasoning and answer, so an explicit budget must be below it; an
effort's budget is a hint, clamped by the plan stage to leave room for the answer.
"""

from __future__ import annotations

from typing import Any

from service.errors import InvalidRequestError
from service.protocol.openai import ChatCompletionRequest
from service.types.request import ReasoningRequest
from service.types.serving import ReasoningPolicy, ReasoningSetup

BUDGET = "max_reasoning_tokens"


def validate_reasoning(
    req: ChatCompletionRequest,
    policy: ReasoningPolicy | None,
    setup: ReasoningSetup | None,
    max_tokens: int | None,
    max_tokens_param: str,
) -> ReasoningRequest | None:
    """None when the model has no reasoning format (asking for thinking is then a 400);
    otherwise the request carries the model's reasoning ``setup`` to the later stages."""
    explicit = _enable_thinking(req)
    effort = req.reasoning_effort
    if effort == "none":
        if explicit is True:
            raise InvalidRequestError(
                "'reasoning_effort' 'none' turns thinking off but 'enable_thinking' is true; send one of them",
                param="reasoning_effort",
            )
        explicit = False
    asked = explicit is True or (effort not in (None, "none")) or req.max_reasoning_tokens is not None
    if policy is None:
        if asked:
            raise InvalidRequestError(
                "this model has no reasoning format, so thinking cannot be turned on; "
                "drop enable_thinking/reasoning_effort/max_reasoning_tokens",
                param=_asked_param(req),
            )
        return None
    # an effort or a budget implies thinking; otherwise the server's default decides
    thinking = explicit if explicit is not None else (asked or policy.default_thinking)
    if not thinking and asked:
        raise InvalidRequestError(
            f"'{_asked_param(req)}' needs thinking, but thinking is off for this request; "
            "remove it or set enable_thinking to true",
            param=_asked_param(req),
        )
    if not thinking:
        return ReasoningRequest(thinking=False, setup=setup)
    from_effort = req.max_reasoning_tokens is None and req.reasoning_effort is not None
    return ReasoningRequest(True, _budget(req, policy, max_tokens, max_tokens_param), from_effort, setup)


def _enable_thinking(req: ChatCompletionRequest) -> bool | None:
    kwargs = req.chat_template_kwargs or {}
    nested = kwargs.get("enable_thinking")
    if nested is not None and not isinstance(nested, bool):
        raise InvalidRequestError(
            "'chat_template_kwargs.enable_thinking' must be true or false", param="chat_template_kwargs.enable_thinking"
        )
    if nested is not None and req.enable_thinking is not None and nested != req.enable_thinking:
        raise InvalidRequestError(
            "'enable_thinking' and 'chat_template_kwargs.enable_thinking' disagree; send only one",
            param="enable_thinking",
        )
    return req.enable_thinking if req.enable_thinking is not None else nested


def _asked_param(req: ChatCompletionRequest) -> str:
    if req.max_reasoning_tokens is not None:
        return BUDGET
    if req.reasoning_effort not in (None, "none"):
        return "reasoning_effort"
    return "enable_thinking"


def _budget(req: ChatCompletionRequest, policy: ReasoningPolicy, max_tokens: int | None, param: str) -> int | None:
    if req.max_reasoning_tokens is not None and req.reasoning_effort is not None:
        raise InvalidRequestError("send either 'reasoning_effort' or 'max_reasoning_tokens', not both", param=BUDGET)
    if req.max_reasoning_tokens is None:
        return dict(policy.effort_budgets).get(req.reasoning_effort) if req.reasoning_effort else None
    budget = req.max_reasoning_tokens
    if budget < 0:
        raise InvalidRequestError(f"'{BUDGET}' must be 0 or more, got {budget}", param=BUDGET)
    if max_tokens is not None and budget >= max_tokens:
        raise InvalidRequestError(
            f"'{BUDGET}' ({budget}) must be below '{param}' ({max_tokens}), which covers the reasoning and "
            f"the answer; raise '{param}' or lower the budget",
            param=BUDGET,
        )
    return budget


def template_kwargs(req: ChatCompletionRequest, setup: ReasoningSetup | None = None) -> tuple[tuple[str, Any], ...]:
    """``chat_template_kwargs`` for the template; ``enable_thinking`` is handled here, and
    ``reasoning_effort`` goes to a template that reads it (gpt-oss) unless the kwargs set it."""
    kwargs = {k: v for k, v in (req.chat_template_kwargs or {}).items() if k != "enable_thinking"}
    for name, value in setup.fmt.effort_kwargs(req.reasoning_effort) if setup is not None else ():
        kwargs.setdefault(name, value)
    return tuple(sorted(kwargs.items()))

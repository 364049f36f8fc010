"""Plan stage: fit the request into the context window and fix the engine's parameters."""

from __future__ import annotations

from runtime_ext.admission.budget import largest_max_new
from service.errors import ContextLengthError, UnsupportedParameterError
from service.types.plan import DecodeConstraint, GenerationPlan, PromptIds, ReasoningPlan
from service.types.request import ValidatedRequest
from service.types.serving import ServingLimits


def make_plan(
    req: ValidatedRequest, prompt: PromptIds, limits: ServingLimits, constraint: DecodeConstraint | None = None
) -> GenerationPlan:
    """One plan per choice; raises ContextLengthError naming the parameter to change.

    ``max_tokens`` covers every generated token. Unset, it is whatever room the
    context leaves (capped by the configured default, if any).
    """
    prompt_len = len(prompt.token_ids)
    room, what = _room(prompt_len, limits)
    if room < 1:
        raise ContextLengthError(
            f"the prompt is {prompt_len} tokens; {what} leaves no room to generate. Shorten the {req.prompt_param}",
            param=req.prompt_param,
        )
    if req.max_tokens is None:
        max_new = room if limits.default_max_tokens is None else min(room, limits.default_max_tokens)
    elif req.max_tokens > room:
        raise ContextLengthError(
            f"'{req.max_tokens_param}' is {req.max_tokens} but the prompt is {prompt_len} tokens and "
            f"{what}; set '{req.max_tokens_param}' to at most {room} or shorten the {req.prompt_param}",
            param=req.max_tokens_param,
        )
    else:
        max_new = req.max_tokens
    reasoning = _reasoning(req, max_new)
    if reasoning is not None and req.bootstrap is not None:
        raise UnsupportedParameterError(
            "a thinking turn is two engine requests (reasoning, then the answer), which one prefill/decode "
            "transfer cannot carry: set 'enable_thinking' to false on this replica",
            param="enable_thinking",
        )
    return GenerationPlan(
        input_ids=prompt.token_ids,
        max_new_tokens=max_new,
        sampling=req.sampling,
        constraint=constraint,
        reasoning=reasoning,
        logprobs=req.logprobs,
        prompt_logprobs=req.echo and req.logprobs is not None,
        bootstrap=req.bootstrap,
    )


def _room(prompt_len: int, limits: ServingLimits) -> tuple[int, str]:
    """How many tokens a prompt of ``prompt_len`` leaves to generate, and what sets it: the
    model's context, or the KV pool when that is smaller (SGLang would otherwise shorten
    max_tokens silently to what the pool can hold)."""
    room = limits.context_length - prompt_len
    what = f"this model's context is {limits.context_length} tokens"
    if limits.kv_pool is not None:
        pool, page = limits.kv_pool
        pool_room = largest_max_new(prompt_len, pool, page)
        if pool_room < room:
            return pool_room, f"this server's KV pool ({pool} tokens, pages of {page}) holds at most {pool_room} more"
    return room, what


def _reasoning(req: ValidatedRequest, max_new: int) -> ReasoningPlan | None:
    """The thinking turn's plan: the setup validation resolved, with the budget that fits."""
    if req.reasoning is None or req.reasoning.setup is None or not req.reasoning.thinking:
        return None
    setup = req.reasoning.setup
    budget = req.reasoning.budget
    if budget is not None and req.reasoning.from_effort:  # a hint: clamped, never an error
        return setup.plan(effort_budget(budget, max_new, len(setup.forced_ids)))
    if budget is not None and budget >= max_new:
        raise ContextLengthError(
            f"'max_reasoning_tokens' ({budget}) leaves no room for the answer: at most {max_new} tokens can "
            f"be generated for this prompt; lower the budget or shorten the messages",
            param="max_reasoning_tokens",
        )
    return setup.plan(budget)


# an effort's budget leaves the answer at least this share of max_tokens (and at least 1 token)
ANSWER_SHARE = 8


def effort_budget(budget: int, max_new: int, marker_tokens: int) -> int:
    """``reasoning_effort``'s budget clamped to what ``max_new`` (max_tokens, or the room the
    context leaves) allows: the forced end marker (``marker_tokens``) and an answer of at
    least ``max_new // ANSWER_SHARE`` tokens (at least 1) must still fit. Never below 0."""
    room = max_new - marker_tokens - max(1, max_new // ANSWER_SHARE)
    return max(0, min(budget, room))

"""Generate stage: run one choice on the engine, as pieces tagged with their phase.

Thinking turns are the reasoning phase, then the answer phase.

Mechanism (chosen by measurement, docs/reasoning.md): two engine requests per choice.
The reasoning phase generates at most ``budget`` tokens and stops at the end marker
(its token id and its text); if the budget ran out, the service appends the end
marker and separator itself. The answer phase continues from prompt + reasoning ids
(a radix-cache hit: only the appended tokens are prefilled), with the answer's grammar
(json_schema / tool calls) active from its first token and ``max_tokens`` minus what
the reasoning used. So the budget is exact, the grammar never constrains reasoning,
and no SGLang internals are patched.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace

from service.types.plan import GenerationPlan, ReasoningPlan
from service.types.ports import EngineClient
from service.types.results import EngineDelta, Piece


async def collect_choice(engine: EngineClient, plan: GenerationPlan, rid: str) -> AsyncIterator[Piece]:
    """The pieces of one choice for a non-streamed response: a plain plan is one engine
    request with no per-token messages (one piece); a thinking turn runs as streamed."""
    if plan.reasoning is not None:
        async for piece in stream_choice(engine, plan, rid):
            yield piece
        return
    o = await engine.generate(plan, rid)
    delta = EngineDelta(o.text, o.completion_tokens, o.prompt_tokens, o.cached_tokens, o.finish_reason)
    yield Piece(
        "answer", replace(delta, logprobs=o.logprobs, prompt_logprobs=o.prompt_logprobs, matched_stop=o.matched_stop)
    )


async def stream_choice(engine: EngineClient, plan: GenerationPlan, rid: str) -> AsyncGenerator[Piece, None]:
    """The increments of one choice; plain plans are one answer phase."""
    if plan.reasoning is None:
        async for delta in _closing(engine.stream(plan, rid)):
            yield Piece("answer", delta)
        return
    r = plan.reasoning
    limit = plan.max_new_tokens if r.budget is None else min(r.budget, plan.max_new_tokens)
    ids: list[int] = []
    last: EngineDelta | None = None
    if limit > 0:
        phase1 = replace(
            plan,
            max_new_tokens=limit,
            constraint=None,
            reasoning=None,
            logprobs=None,  # logprobs cover the answer's tokens (docs/api.md)
            sampling=replace(plan.sampling, stop=(r.end_text,), stop_token_ids=(r.end_id,)),
        )
        async for delta in _closing(engine.stream(phase1, f"{rid}-think")):
            ids += delta.token_ids
            last = delta
            yield Piece("reasoning", replace(delta, finish_reason=None), _reasoning_count(delta, r))
    natural = last is not None and last.matched_stop in (r.end_id, r.end_text)
    if last is not None and last.finish_reason == "stop" and not natural:
        # EOS inside the reasoning: done (its text was yielded above; only the finish is new)
        yield Piece("reasoning", replace(last, text=""), _reasoning_count(last, r))
        return
    appended = r.separator_ids if natural else r.forced_ids
    used = len(ids) + len(appended)
    reasoning_tokens = len(ids) - (1 if natural else 0)
    if plan.max_new_tokens - used < 1:
        yield Piece("answer", _no_answer(last, plan, used), reasoning_tokens)
        return
    phase2 = replace(
        plan,
        input_ids=plan.input_ids + tuple(ids) + appended,
        max_new_tokens=plan.max_new_tokens - used,
        reasoning=None,
    )
    async for delta in _closing(engine.stream(phase2, f"{rid}-answer")):
        yield Piece(
            "answer",
            replace(
                delta,
                completion_tokens=used + delta.completion_tokens,
                prompt_tokens=len(plan.input_ids),
                cached_tokens=last.cached_tokens if last else delta.cached_tokens,
            ),
            reasoning_tokens,
        )


def _reasoning_count(delta: EngineDelta, r: ReasoningPlan) -> int:
    """Reasoning tokens so far: the token that stopped the phase (the end marker, or EOS)
    counts as a completion token but is not reasoning."""
    stopped = isinstance(delta.matched_stop, int) or delta.matched_stop == r.end_text
    return delta.completion_tokens - (1 if delta.finish_reason == "stop" and stopped else 0)


def _no_answer(last: EngineDelta | None, plan: GenerationPlan, used: int) -> EngineDelta:
    """max_tokens is spent by the reasoning (and the appended markers): no answer phase."""
    prompt = len(plan.input_ids)
    return EngineDelta(
        text="",
        completion_tokens=min(used, plan.max_new_tokens),
        prompt_tokens=prompt,
        cached_tokens=last.cached_tokens if last else 0,
        finish_reason="length",
    )


async def _closing(stream: AsyncIterator[EngineDelta]) -> AsyncIterator[EngineDelta]:
    """Iterate ``stream`` and close it (aborting its engine request) however we leave."""
    try:
        async for delta in stream:
            yield delta
    finally:
        await stream.aclose()  # type: ignore[attr-defined]

"""Thinking turns: the reasoning phase, then the answer phase (engine stage).

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

from dataclasses import dataclass, replace
from typing import AsyncIterator, Callable

from runtime_ext.formats import ReasoningFormat
from service.pipeline.types import EngineClient, EngineDelta, GenerationPlan, ReasoningPlan


class ReasoningMarkerError(ValueError):
    """A format's end marker is not one token of the serving tokenizer (startup error)."""


@dataclass(frozen=True)
class ReasoningSetup:
    """A reasoning format resolved against the serving tokenizer (built at startup)."""

    fmt: ReasoningFormat
    end_id: int
    forced_ids: tuple[int, ...]
    separator_ids: tuple[int, ...]

    @classmethod
    def build(cls, fmt: ReasoningFormat, encode: Callable[[str], list[int]]) -> "ReasoningSetup":
        for marker in (fmt.start, fmt.end):
            ids = encode(marker)
            if len(ids) != 1:
                raise ReasoningMarkerError(
                    f"reasoning format {fmt.name!r}: marker {marker!r} is {len(ids)} tokens {ids} in this "
                    "tokenizer, not one; set reasoning.format to one whose markers are single tokens (or none)")
        return cls(fmt, encode(fmt.end)[0], tuple(encode(fmt.forced_end)), tuple(encode(fmt.separator)))

    def plan(self, budget: int | None) -> ReasoningPlan:
        return ReasoningPlan(budget, self.end_id, self.fmt.end, self.forced_ids, self.separator_ids)


@dataclass(frozen=True)
class Piece:
    """One increment of a choice: ``phase`` "reasoning" or "answer"; ``delta.completion_tokens``
    counts the whole turn so far (reasoning + appended markers + answer)."""

    phase: str
    delta: EngineDelta
    reasoning_tokens: int = 0


async def run_choice(engine: EngineClient, plan: GenerationPlan, rid: str) -> AsyncIterator[Piece]:
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
        phase1 = replace(plan, max_new_tokens=limit, constraint=None, reasoning=None, sampling=replace(
            plan.sampling, stop=(r.end_text,), stop_token_ids=(r.end_id,)))
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
    phase2 = replace(plan, input_ids=plan.input_ids + tuple(ids) + appended,
                     max_new_tokens=plan.max_new_tokens - used, reasoning=None)
    async for delta in _closing(engine.stream(phase2, f"{rid}-answer")):
        yield Piece("answer", replace(delta, completion_tokens=used + delta.completion_tokens,
                                      prompt_tokens=len(plan.input_ids),
                                      cached_tokens=last.cached_tokens if last else delta.cached_tokens),
                    reasoning_tokens)


def _reasoning_count(delta: EngineDelta, r: ReasoningPlan) -> int:
    """Reasoning tokens so far: the token that stopped the phase (the end marker, or EOS)
    counts as a completion token but is not reasoning."""
    stopped = isinstance(delta.matched_stop, int) or delta.matched_stop == r.end_text
    return delta.completion_tokens - (1 if delta.finish_reason == "stop" and stopped else 0)


def _no_answer(last: EngineDelta | None, plan: GenerationPlan, used: int) -> EngineDelta:
    """max_tokens is spent by the reasoning (and the appended markers): no answer phase."""
    prompt = len(plan.input_ids)
    return EngineDelta(text="", completion_tokens=min(used, plan.max_new_tokens), prompt_tokens=prompt,
                       cached_tokens=last.cached_tokens if last else 0, finish_reason="length")


async def _closing(stream: AsyncIterator[EngineDelta]) -> AsyncIterator[EngineDelta]:
    """Iterate ``stream`` and close it (aborting its engine request) however we leave."""
    try:
        async for delta in stream:
            yield delta
    finally:
        await stream.aclose()  # type: ignore[attr-defined]

"""The legacy ``text_completion`` objects of a prepared completion: whole, or streamed.

Each prompt of a batch runs as one prepared request of ``n`` choices (choices numbered
``prompt_index × n + i``); streamed, the prompts one after the other, their choices through
``ChatPipeline.steps`` (the one choice-streaming loop) as they come.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from service import metrics
from service.fronts.completions.convert_request import PreparedCompletion
from service.pipeline.chat import ChatPipeline
from service.pipeline.openai_objects import legacy_logprobs, make_usage, text_choice, text_completion
from service.protocol.completions import Completion, CompletionChoice
from service.protocol.openai import Usage
from service.types.results import EngineDelta, Piece


async def complete(pipeline: ChatPipeline, prep: PreparedCompletion) -> Completion:
    runs = await asyncio.gather(*(pipeline.finished(p) for p in prep.prompts))
    want = prep.prompts[0].request.logprobs is not None
    n = prep.prompts[0].request.n
    choices = [
        text_choice(i * n + j, prep.echoes[i], f, want)
        for i, finished in enumerate(runs)
        for j, f in enumerate(finished)
    ]
    usage = _usage([[f.counts for f in run] for run in runs])
    metrics.record_usage(usage)
    return text_completion(prep.rid, prep.created, prep.prompts[0].request.model, choices, usage)


async def stream(pipeline: ChatPipeline, prep: PreparedCompletion) -> AsyncIterator[Completion]:
    """The prompts one after the other; their ``n`` choices interleaved as they come."""
    first = prep.prompts[0].request
    counted: list[list[EngineDelta]] = []
    for i, chat in enumerate(prep.prompts):
        last: dict[int, Piece] = {}
        for j in range(first.n):
            if prep.echoes[i]:
                yield _chunk(prep, CompletionChoice(index=i * first.n + j, text=prep.echoes[i], finish_reason=None))
        steps = pipeline.steps(chat)
        try:
            async for j, piece, step in steps:
                last[j] = piece
                for event in step.events:
                    if event.content or event.logprobs:
                        logprobs = legacy_logprobs(event.logprobs) if first.logprobs is not None else None
                        choice = CompletionChoice(
                            index=i * first.n + j, text=event.content, finish_reason=None, logprobs=logprobs
                        )
                        yield _chunk(prep, choice)
                if step.result is not None:
                    finish = step.result.finish_reason
                    yield _chunk(prep, CompletionChoice(index=i * first.n + j, text="", finish_reason=finish))
        finally:
            await steps.aclose()
        if last:
            counted.append([last[j].delta for j in sorted(last)])
    if counted:
        usage = _usage(counted)
        metrics.record_usage(usage)
        if first.include_usage:
            yield text_completion(prep.rid, prep.created, first.model, [], usage)


def _chunk(prep: PreparedCompletion, choice: CompletionChoice) -> Completion:
    return Completion(id=prep.rid, created=prep.created, model=prep.prompts[0].request.model, choices=[choice])


def _usage(runs: list[list[EngineDelta]]) -> Usage:
    """Each prompt's tokens once (its choices share them), every choice's completion tokens."""
    return make_usage(
        sum(run[0].prompt_tokens for run in runs),
        sum(d.completion_tokens for run in runs for d in run),
        sum(run[0].cached_tokens for run in runs),
    )

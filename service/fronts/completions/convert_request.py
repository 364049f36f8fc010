"""The ``/v1/completions`` orchestrator: the chat pipeline's stages with the prompt as given.

validate_completion -> constraints -> completion_prompts -> plan (one per prompt) ->
grammar gate -> generate -> choice -> response. No chat template and no tools or
reasoning; each prompt of a batch runs as one prepared request of ``n`` choices,
through ``ChatPipeline``'s engine, grammar gate and choice handling.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from service import metrics
from service.pipeline.chat import ChatPipeline, PreparedChat, merge_choices
from service.pipeline.constraints import build_constraint
from service.pipeline.plan import make_plan
from service.pipeline.prompt import completion_prompts
from service.pipeline.response import legacy_logprobs, make_usage, text_choice, text_completion
from service.pipeline.validate import validate_completion
from service.protocol.completions import Completion, CompletionChoice, CompletionRequest
from service.protocol.openai import Usage
from service.types import EngineDelta, Piece


@dataclass(frozen=True)
class PreparedCompletion:
    rid: str
    created: int
    prompts: tuple[PreparedChat, ...]  # one per prompt of the batch
    echoes: tuple[str, ...]  # the prompt texts to echo ("" without echo)


class CompletionPipeline:
    def __init__(self, chat: ChatPipeline):
        self.chat = chat

    async def prepare(self, raw: CompletionRequest) -> PreparedCompletion:
        c = self.chat
        request = validate_completion(raw, c.limits)
        constraint = build_constraint(request, c.default_loosening)
        prompts = completion_prompts(raw.prompt, c.template, c.limits.vocab_size)
        plans = [make_plan(request, p, c.limits, constraint) for p in prompts]
        if constraint is not None:  # last: the only stage that may take real time
            served = await c.grammar.ensure_compiles(constraint)
            plans = [replace(plan, constraint=served) for plan in plans]
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        texts = [raw.prompt] if isinstance(raw.prompt, str) else [None] * len(prompts)
        echoes = tuple(
            (t if isinstance(t, str) else c.template.decode(p.token_ids)) if raw.echo else ""
            for t, p in zip(texts, prompts)
        )
        chats = tuple(PreparedChat(f"{rid}-{i}", created, request, plan) for i, plan in enumerate(plans))
        return PreparedCompletion(rid, created, chats, echoes)

    async def complete(self, prep: PreparedCompletion) -> Completion:
        runs = await asyncio.gather(*(self.chat.finished(p) for p in prep.prompts))
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

    async def stream(self, prep: PreparedCompletion) -> AsyncIterator[Completion]:
        """The prompts one after the other; their ``n`` choices interleaved as they come."""
        first = prep.prompts[0].request
        counted: list[list[EngineDelta]] = []
        for i, chat in enumerate(prep.prompts):
            last: dict[int, Piece] = {}
            outputs = [self.chat.output(chat) for _ in range(first.n)]
            for j in range(first.n):
                if prep.echoes[i]:
                    yield self._chunk(
                        prep, CompletionChoice(index=i * first.n + j, text=prep.echoes[i], finish_reason=None)
                    )
            async for j, piece in merge_choices(self.chat.engine, chat):
                last[j] = piece
                step = outputs[j].take(piece)
                for event in step.events:
                    if event.content or event.logprobs:
                        logprobs = legacy_logprobs(event.logprobs) if first.logprobs is not None else None
                        choice = CompletionChoice(
                            index=i * first.n + j, text=event.content, finish_reason=None, logprobs=logprobs
                        )
                        yield self._chunk(prep, choice)
                if step.result is not None:
                    yield self._chunk(
                        prep, CompletionChoice(index=i * first.n + j, text="", finish_reason=step.result.finish_reason)
                    )
            if last:
                counted.append([last[j].delta for j in sorted(last)])
        if counted:
            usage = _usage(counted)
            metrics.record_usage(usage)
            if first.include_usage:
                yield text_completion(prep.rid, prep.created, first.model, [], usage)

    @staticmethod
    def _chunk(prep: PreparedCompletion, choice: CompletionChoice) -> Completion:
        return Completion(id=prep.rid, created=prep.created, model=prep.prompts[0].request.model, choices=[choice])


def _usage(runs: list[list[EngineDelta]]) -> Usage:
    """Each prompt's tokens once (its choices share them), every choice's completion tokens."""
    return make_usage(
        sum(run[0].prompt_tokens for run in runs),
        sum(d.completion_tokens for run in runs for d in run),
        sum(run[0].cached_tokens for run in runs),
    )

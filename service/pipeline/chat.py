"""The orchestrator: the only place the stage order is written; it only sequences.

validate -> constraints -> prompt -> plan -> grammar check -> generate -> choice -> OpenAI objects.
``prepare`` runs every check that can fail because of the request before any byte is
sent, so a streamed request that is wrong still gets a plain 4xx, not a broken stream.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

from service import metrics
from service.errors import EngineError
from service.pipeline.choice import ChoiceOutput
from service.pipeline.constraints import build_constraint
from service.pipeline.generate import collect_choice, stream_choice
from service.pipeline.openai_objects import ChunkFactory, completion, make_usage
from service.pipeline.plan import make_plan
from service.pipeline.prompt import build_prompt
from service.pipeline.resample import collect_validated
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from service.types.plan import GenerationPlan, PromptIds
from service.types.ports import ChatTemplate, EngineClient, GrammarChecker
from service.types.request import ValidatedRequest
from service.types.results import ChoiceStep, FinishedChoice, Piece
from service.types.serving import ModelFormats, ServingLimits


@dataclass(frozen=True)
class PreparedChat:
    rid: str
    created: int
    request: ValidatedRequest
    plan: GenerationPlan


class ChatPipeline:
    def __init__(
        self,
        engine: EngineClient,
        template: ChatTemplate,
        limits: ServingLimits,
        grammar: GrammarChecker,
        default_loosening: bool = False,
        formats: ModelFormats = ModelFormats(),
        resample_attempts: int = 2,
        resample_unenforceable: bool = False,
    ):
        self.formats = formats
        self.engine = engine
        self.template = template
        self.limits = limits
        self.grammar = grammar
        self.default_loosening = default_loosening
        self.resample_attempts = resample_attempts
        self.resample_unenforceable = resample_unenforceable

    async def prepare(self, raw: ChatCompletionRequest) -> PreparedChat:
        request = validate_request(raw, self.limits, self.formats)
        (plan,) = await self.plans(request, lambda: [build_prompt(request, self.template)])
        return PreparedChat(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), request, plan)

    async def plans(
        self, request: ValidatedRequest, prompts: Callable[[], Sequence[PromptIds]]
    ) -> list[GenerationPlan]:
        """constraints -> ``prompts()`` -> one plan per prompt -> grammar check: a validated request's
        plans (``/v1/completions`` brings its own prompts; chat renders one)."""
        constraint = build_constraint(request, self.default_loosening, self.resample_unenforceable)
        plans = [make_plan(request, prompt, self.limits, constraint) for prompt in prompts()]
        if constraint is not None:  # last: the only stage that may take real time
            served = await self.grammar.ensure_compiles(constraint)
            plans = [replace(plan, constraint=served) for plan in plans]
        return plans

    def prompt_ids(self, raw: ChatCompletionRequest) -> tuple[int, ...]:
        """The prompt's token ids (the validate and prompt stages only; nothing is generated)."""
        return build_prompt(validate_request(raw, self.limits, self.formats), self.template).token_ids

    def output(self, chat: PreparedChat) -> ChoiceOutput:
        r = chat.request.reasoning  # a thinking turn's output opens in the reasoning block
        setup = r.setup if r is not None and chat.plan.reasoning is not None else None
        return ChoiceOutput(
            chat.plan.constraint,
            chat.request.tools,
            setup.fmt if setup is not None else None,
            logprobs=chat.request.logprobs is not None,
            text=self.formats.output,
        )

    async def finished(self, chat: PreparedChat) -> list[FinishedChoice]:
        """Every choice of ``chat``, run concurrently, in order."""
        cached = await share_prompt(self.engine, chat)
        n, budget = chat.request.n, self.resample_attempts

        async def collect(plan: GenerationPlan, rid: str) -> FinishedChoice:
            return await self._collect(chat, plan, rid, cached)

        return list(
            await asyncio.gather(*(collect_validated(collect, plan, rid, n, budget) for rid, plan in _choices(chat)))
        )

    async def complete(self, chat: PreparedChat) -> ChatCompletion:
        response = completion(chat.rid, chat.created, chat.request.model, await self.finished(chat))
        metrics.record_usage(response.usage)
        return response

    async def _collect(self, chat: PreparedChat, plan: GenerationPlan, rid: str, cached: int | None) -> FinishedChoice:
        out = self.output(chat)
        async for piece in collect_choice(self.engine, plan, rid):
            if (result := out.take(piece).result) is not None:
                return FinishedChoice(result, _reported(piece, cached).delta, piece.reasoning_tokens)
        raise EngineError("the engine stream ended without a finish reason")

    async def steps(self, chat: PreparedChat) -> AsyncGenerator[tuple[int, Piece, ChoiceStep], None]:
        """Every choice's pieces as they come, each with what its ``ChoiceOutput`` makes of it
        (the one choice-streaming loop; closing it aborts the engine requests)."""
        outputs = [self.output(chat) for _ in range(chat.request.n)]
        pieces = merge_choices(self.engine, chat)
        try:
            async for index, piece in pieces:
                yield index, piece, outputs[index].take(piece)
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]

    async def stream(self, chat: PreparedChat) -> AsyncIterator[ChatCompletionChunk]:
        """Chunks of all choices, interleaved as they come; usage last if asked for."""
        chunks, started = ChunkFactory(chat.rid, chat.created, chat.request.model), time.perf_counter()
        for index in range(chat.request.n):
            yield chunks.role(index)
        last: dict[int, Piece] = {}
        steps = self.steps(chat)
        try:
            async for index, piece, step in steps:
                if not last:
                    metrics.TTFT.observe(time.perf_counter() - started)
                last[index] = piece
                for event in step.events:
                    if (chunk := chunks.event(index, event)) is not None:
                        yield chunk
                if step.result is not None:
                    yield chunks.finish(index, step.result.finish_reason, step.result.validation, step.result.stop)
        finally:
            await steps.aclose()
        if last:
            first = last[0].delta
            usage = make_usage(
                first.prompt_tokens,
                sum(p.delta.completion_tokens for p in last.values()),
                first.cached_tokens,
                sum(p.reasoning_tokens for p in last.values()),
            )
            metrics.record_usage(usage)
            if chat.request.include_usage:
                yield chunks.usage(usage)


def _choices(chat: PreparedChat) -> list[tuple[str, GenerationPlan]]:
    """One (engine request id, plan) per choice. With a seed, choice i samples with
    seed + i: the choices of one request differ, and the request repeats exactly."""
    seed = chat.plan.sampling.seed
    out = []
    for i in range(chat.request.n):
        plan = chat.plan
        if seed is not None and i:
            plan = replace(plan, sampling=replace(plan.sampling, seed=seed + i))
        out.append((f"{chat.rid}-{i}", plan))
    return out


async def share_prompt(engine: EngineClient, chat: PreparedChat) -> int | None:
    """n > 1: the prompt is prefilled once ahead of the choices, which then reuse it from the
    prefix cache (one copy in the KV pool; the budget counts it once). Returns the prompt
    tokens that were cached before this request: usage reports those, not the warm-up's."""
    if chat.request.n < 2:
        return None
    return await engine.cache_prompt(chat.plan, f"{chat.rid}-prompt")


def _reported(piece: Piece, cached: int | None) -> Piece:
    return piece if cached is None else replace(piece, delta=replace(piece.delta, cached_tokens=cached))


async def merge_choices(engine: EngineClient, chat: PreparedChat) -> AsyncIterator[tuple[int, Piece]]:
    """Interleave the n choice streams; closing this generator aborts every one of them."""
    cached = await share_prompt(engine, chat)
    choices = _choices(chat)
    if len(choices) == 1:
        stream = stream_choice(engine, choices[0][1], choices[0][0])
        try:
            async for piece in stream:
                yield 0, piece
        finally:
            await stream.aclose()
        return
    queue: asyncio.Queue[tuple[int, Piece | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, rid: str, plan: GenerationPlan) -> None:
        stream = stream_choice(engine, plan, rid)
        try:
            async for piece in stream:
                await queue.put((index, piece))
            await queue.put((index, None))
        except BaseException as exc:  # handed to the consumer, re-raised there
            await queue.put((index, exc))
            raise
        finally:
            await stream.aclose()

    tasks = [asyncio.create_task(pump(i, rid, plan)) for i, (rid, plan) in enumerate(choices)]
    try:
        remaining = len(tasks)
        while remaining:
            index, item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, _reported(item, cached)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

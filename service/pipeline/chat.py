"""The orchestrator: the only place the stage order is written.

validate -> prompt -> plan -> engine -> response. ``prepare`` runs every check that
can fail because of the request before any byte is sent, so a streamed request that
is wrong still gets a plain 4xx, not a broken stream.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, replace
from typing import AsyncIterator

from runtime_ext.formats import ToolFormat
from service.pipeline.constraints import build_constraint
from service.pipeline.plan import make_plan
from service.pipeline.prompt import build_prompt
from service.pipeline.types import (
    ChatTemplate,
    EngineClient,
    EngineDelta,
    GenerationPlan,
    GrammarChecker,
    ServingLimits,
    ValidatedRequest,
)
from service.pipeline.validate import validate_request
from service.postprocess.choice import ChoiceOutput
from service.postprocess.response import ChunkFactory, completion, make_usage
from service.protocol.openai import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest


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
        tool_format: ToolFormat | None = None,
    ):
        self.tool_format = tool_format
        self.engine = engine
        self.template = template
        self.limits = limits
        self.grammar = grammar
        self.default_loosening = default_loosening

    async def prepare(self, raw: ChatCompletionRequest) -> PreparedChat:
        request = validate_request(raw, self.limits)
        constraint = build_constraint(request, self.default_loosening, self.tool_format)
        prompt = build_prompt(request, self.template, self.tool_format)
        plan = make_plan(request, prompt, self.limits, constraint)
        if constraint is not None:  # last: the only stage that may take real time
            await self.grammar.ensure_compiles(constraint)
        return PreparedChat(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), request, plan)

    def _output(self, chat: PreparedChat) -> ChoiceOutput:
        return ChoiceOutput(chat.plan.constraint, chat.request.tools, self.tool_format)

    async def complete(self, chat: PreparedChat) -> ChatCompletion:
        outputs = await asyncio.gather(*(self.engine.generate(plan, rid) for rid, plan in _choices(chat)))
        processors = [self._output(chat) for _ in outputs]
        return completion(chat.rid, chat.created, chat.request.model, outputs, processors)

    async def stream(self, chat: PreparedChat) -> AsyncIterator[ChatCompletionChunk]:
        """Chunks of all choices, interleaved as they come; usage last if asked for."""
        chunks = ChunkFactory(chat.rid, chat.created, chat.request.model)
        for index in range(chat.request.n):
            yield chunks.role(index)
        last: dict[int, EngineDelta] = {}
        outputs = [self._output(chat) for _ in range(chat.request.n)]
        async for index, delta in _merge(self.engine, chat):
            last[index] = delta
            chunk = chunks.event(index, outputs[index].feed(delta.text)) if delta.text else None
            if chunk is not None:
                yield chunk
            if delta.finish_reason is not None:
                event, result = outputs[index].finish(delta.finish_reason)
                if (chunk := chunks.event(index, event)) is not None:
                    yield chunk
                yield chunks.finish(index, result.finish_reason, result.validation)
        if chat.request.include_usage and last:
            first = last[0]
            completion_tokens = sum(d.completion_tokens for d in last.values())
            yield chunks.usage(make_usage(first.prompt_tokens, completion_tokens, first.cached_tokens))


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


async def _merge(engine: EngineClient, chat: PreparedChat) -> AsyncIterator[tuple[int, EngineDelta]]:
    """Interleave the n choice streams; closing this generator aborts every one of them."""
    choices = _choices(chat)
    if len(choices) == 1:
        stream = engine.stream(choices[0][1], choices[0][0])
        try:
            async for delta in stream:
                yield 0, delta
        finally:
            await stream.aclose()
        return
    queue: asyncio.Queue[tuple[int, EngineDelta | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, rid: str, plan: GenerationPlan) -> None:
        stream = engine.stream(plan, rid)
        try:
            async for delta in stream:
                await queue.put((index, delta))
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
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

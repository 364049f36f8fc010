"""Response stage: engine outputs -> OpenAI ChatCompletion / chunk objects and usage."""

from __future__ import annotations

from typing import Sequence

from service.pipeline.types import EngineOutput
from service.postprocess.choice import ChoiceEvent, ChoiceOutput
from service.protocol.openai import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    Delta,
    SchemaValidation,
    Usage,
)


def make_usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Usage:
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details={"cached_tokens": cached_tokens},
        completion_tokens_details={"reasoning_tokens": 0},
    )


def completion(
    rid: str, created: int, model: str, outputs: Sequence[EngineOutput], processors: Sequence[ChoiceOutput]
) -> ChatCompletion:
    """The non-streaming response; prompt tokens are counted once for all choices."""
    choices = []
    for i, (o, proc) in enumerate(zip(outputs, processors)):
        proc.feed(o.text)
        _, result = proc.finish(o.finish_reason)
        message = AssistantMessage(content=result.content, tool_calls=result.tool_calls)
        choices.append(Choice(index=i, message=message, finish_reason=result.finish_reason,
                              schema_validation=result.validation))
    usage = make_usage(
        prompt_tokens=outputs[0].prompt_tokens,
        completion_tokens=sum(o.completion_tokens for o in outputs),
        cached_tokens=outputs[0].cached_tokens,
    )
    return ChatCompletion(id=rid, created=created, model=model, choices=choices, usage=usage)


class ChunkFactory:
    """Builds the chunks of one streamed completion (same id/created/model on each)."""

    def __init__(self, rid: str, created: int, model: str):
        self._head = {"id": rid, "created": created, "model": model}

    def role(self, index: int) -> ChatCompletionChunk:
        delta = Delta(role="assistant", content="")
        return ChatCompletionChunk(**self._head, choices=[ChunkChoice(index=index, delta=delta)])

    def event(self, index: int, event: ChoiceEvent) -> ChatCompletionChunk | None:
        """The chunk for what a choice produced (None when it produced nothing yet)."""
        if not event.content and not event.tool_calls:
            return None
        delta = Delta(content=event.content or None, tool_calls=list(event.tool_calls) or None)
        return ChatCompletionChunk(**self._head, choices=[ChunkChoice(index=index, delta=delta)])

    def finish(self, index: int, reason: str, validation: SchemaValidation | None = None) -> ChatCompletionChunk:
        choice = ChunkChoice(index=index, delta=Delta(), finish_reason=reason, schema_validation=validation)
        return ChatCompletionChunk(**self._head, choices=[choice])

    def usage(self, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(**self._head, choices=[], usage=usage)

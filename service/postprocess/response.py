"""Response stage: engine outputs -> OpenAI ChatCompletion / chunk objects and usage."""

from __future__ import annotations

from typing import Sequence

from service.pipeline.types import DecodeConstraint, EngineOutput
from service.postprocess.validation import validate_output
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
    rid: str, created: int, model: str, outputs: Sequence[EngineOutput], constraint: DecodeConstraint | None
) -> ChatCompletion:
    """The non-streaming response; prompt tokens are counted once for all choices."""
    choices = [
        Choice(
            index=i,
            message=AssistantMessage(content=o.text),
            finish_reason=o.finish_reason,
            schema_validation=validate_output(o.text, constraint, o.finish_reason),
        )
        for i, o in enumerate(outputs)
    ]
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

    def content(self, index: int, text: str) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            **self._head, choices=[ChunkChoice(index=index, delta=Delta(content=text))]
        )

    def finish(self, index: int, reason: str, validation: SchemaValidation | None = None) -> ChatCompletionChunk:
        choice = ChunkChoice(index=index, delta=Delta(), finish_reason=reason, schema_validation=validation)
        return ChatCompletionChunk(**self._head, choices=[choice])

    def usage(self, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(**self._head, choices=[], usage=usage)

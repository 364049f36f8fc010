"""Response stage: finished choices / choice events -> OpenAI ChatCompletion / chunk objects and usage."""

from __future__ import annotations

from collections.abc import Sequence

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
from service.types import ChoiceEvent, FinishedChoice


def make_usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int = 0) -> Usage:
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details={"cached_tokens": cached_tokens},
        completion_tokens_details={"reasoning_tokens": reasoning_tokens},
    )


def completion(rid: str, created: int, model: str, finished: Sequence[FinishedChoice]) -> ChatCompletion:
    """The non-streaming response; prompt tokens are counted once for all choices."""
    choices = []
    for i, f in enumerate(finished):
        r = f.result
        message = AssistantMessage(
            content=r.content, tool_calls=r.tool_calls, reasoning_content=r.reasoning, reasoning=r.reasoning
        )
        choices.append(Choice(index=i, message=message, finish_reason=r.finish_reason, schema_validation=r.validation))
    usage = make_usage(
        prompt_tokens=finished[0].counts.prompt_tokens,
        completion_tokens=sum(f.counts.completion_tokens for f in finished),
        cached_tokens=finished[0].counts.cached_tokens,
        reasoning_tokens=sum(f.reasoning_tokens for f in finished),
    )
    return ChatCompletion(id=rid, created=created, model=model, choices=choices, usage=usage)


class ChunkFactory:
    """Builds the chunks of one streamed completion (same id/created/model on each)."""

    def __init__(self, rid: str, created: int, model: str):
        self._rid, self._created, self._model = rid, created, model

    def _chunk(self, choices: list[ChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self._rid, created=self._created, model=self._model, choices=choices, usage=usage)

    def role(self, index: int) -> ChatCompletionChunk:
        delta = Delta(role="assistant", content="")
        return self._chunk([ChunkChoice(index=index, delta=delta)])

    def event(self, index: int, event: ChoiceEvent) -> ChatCompletionChunk | None:
        """The chunk for what a choice produced (None when it produced nothing yet)."""
        if not event.content and not event.tool_calls and not event.reasoning:
            return None
        reasoning = event.reasoning or None
        delta = Delta(
            content=event.content or None,
            tool_calls=list(event.tool_calls) or None,
            reasoning_content=reasoning,
            reasoning=reasoning,
        )
        return self._chunk([ChunkChoice(index=index, delta=delta)])

    def finish(self, index: int, reason: str, validation: SchemaValidation | None = None) -> ChatCompletionChunk:
        choice = ChunkChoice(index=index, delta=Delta(), finish_reason=reason, schema_validation=validation)
        return self._chunk([choice])

    def usage(self, usage: Usage) -> ChatCompletionChunk:
        return self._chunk([], usage)

"""OpenAI-objects stage: finished choices / choice events -> OpenAI ChatCompletion / chunk objects and usage."""

from __future__ import annotations

from collections.abc import Sequence

from service.protocol.completions import Completion, CompletionChoice, CompletionLogprobs
from service.protocol.openai import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    SchemaValidation,
    TokenLogprobOut,
    TopLogprob,
    Usage,
)
from service.types.results import ChoiceEvent, FinishedChoice, TokenLogprob


def choice_logprobs(logprobs: Sequence[TokenLogprob] | None) -> ChoiceLogprobs | None:
    """OpenAI's ``logprobs`` object of a choice (or of a chunk's increment)."""
    if logprobs is None:
        return None
    return ChoiceLogprobs(
        content=[
            TokenLogprobOut(
                token=t.token,
                logprob=_sampled(t),
                bytes=list(t.token_bytes),
                top_logprobs=[TopLogprob(token=tok, logprob=lp, bytes=list(data)) for tok, data, lp in t.top],
            )
            for t in logprobs
        ]
    )


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
        choices.append(
            Choice(
                index=i,
                message=message,
                finish_reason=r.finish_reason,
                schema_validation=r.validation,
                logprobs=choice_logprobs(r.logprobs),
                stop_reason=r.stop,
            )
        )
    usage = make_usage(
        prompt_tokens=finished[0].counts.prompt_tokens,
        completion_tokens=sum(f.counts.completion_tokens for f in finished),
        cached_tokens=finished[0].counts.cached_tokens,
        reasoning_tokens=sum(f.reasoning_tokens for f in finished),
    )
    if any(f.schema_attempts for f in finished):
        usage.schema_attempts = sum(f.schema_attempts for f in finished)
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
        if not event.content and not event.tool_calls and not event.reasoning and not event.logprobs:
            return None
        reasoning = event.reasoning or None
        delta = Delta(
            content=event.content or None,
            tool_calls=list(event.tool_calls) or None,
            reasoning_content=reasoning,
            reasoning=reasoning,
        )
        logprobs = choice_logprobs(event.logprobs) if event.logprobs else None
        return self._chunk([ChunkChoice(index=index, delta=delta, logprobs=logprobs)])

    def finish(
        self, index: int, reason: str, validation: SchemaValidation | None = None, stop: str | None = None
    ) -> ChatCompletionChunk:
        choice = ChunkChoice(
            index=index, delta=Delta(), finish_reason=reason, schema_validation=validation, stop_reason=stop
        )
        return self._chunk([choice])

    def usage(self, usage: Usage) -> ChatCompletionChunk:
        return self._chunk([], usage)


def _sampled(t: TokenLogprob) -> float:
    if t.logprob is None:  # only a first prompt token has none; chat logprobs are of sampled tokens
        raise ValueError(f"token {t.token!r} has no logprob")
    return t.logprob


def legacy_logprobs(tokens: Sequence[TokenLogprob], start: int = 0) -> CompletionLogprobs:
    """The completions endpoint's logprobs: parallel lists; ``text_offset`` counts characters
    from the start of the choice's text (``start``: where these tokens begin)."""
    offsets, at = [], start
    for t in tokens:
        offsets.append(at)
        at += len(t.token)
    return CompletionLogprobs(
        tokens=[t.token for t in tokens],
        token_logprobs=[t.logprob for t in tokens],
        top_logprobs=[None if t.logprob is None else {tok: lp for tok, _, lp in t.top} for t in tokens],
        text_offset=offsets,
    )


def text_choice(index: int, echo: str, f: FinishedChoice, want_logprobs: bool) -> CompletionChoice:
    """One finished completions choice; with ``echo`` the prompt (and its logprobs) come first."""
    r = f.result
    text = r.content or ""
    logprobs = None
    if want_logprobs:
        tokens = tuple(f.counts.prompt_logprobs if echo else ()) + tuple(r.logprobs or ())
        logprobs = legacy_logprobs(tokens)
    return CompletionChoice(index=index, text=echo + text, finish_reason=r.finish_reason, logprobs=logprobs)


def text_completion(
    rid: str, created: int, model: str, choices: Sequence[CompletionChoice], usage: Usage
) -> Completion:
    return Completion(id=rid, created=created, model=model, choices=list(choices), usage=usage)

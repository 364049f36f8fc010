"""What generation produced: the engine's increments and outputs (``EngineDelta``,
``EngineOutput``, ``Piece``) and each choice's events and result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.protocol.openai import CustomToolCall, DeltaToolCall, SchemaValidation, ToolCall

Phase = Literal["reasoning", "answer"]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's logprob (and the top alternatives at its position), as the
    engine computed it: after the grammar mask and temperature (docs/api.md)."""

    token: str
    token_bytes: tuple[int, ...]
    logprob: float | None  # None: the first prompt token (nothing precedes it)
    top: tuple[tuple[str, tuple[int, ...], float], ...] = ()  # (token, bytes, logprob), best first


@dataclass(frozen=True)
class EngineDelta:
    """One streamed increment from the engine; ``finish_reason`` set on the last one."""

    text: str
    completion_tokens: int  # cumulative
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str | None = None
    token_ids: tuple[int, ...] = ()  # the ids of this increment
    matched_stop: int | str | None = None  # the stop token id / string that ended it
    logprobs: tuple[TokenLogprob, ...] = ()  # of this increment's tokens (when asked for)
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # non-streamed, with GenerationPlan.prompt_logprobs


@dataclass(frozen=True)
class Piece:
    """One increment of a choice (generate stage): ``delta.completion_tokens`` counts the
    whole turn so far (reasoning + appended markers + answer)."""

    phase: Phase
    delta: EngineDelta
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class EngineOutput:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    logprobs: tuple[TokenLogprob, ...] = ()
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # with GenerationPlan.prompt_logprobs
    matched_stop: int | str | None = None  # the stop token id / string that ended it


@dataclass(frozen=True)
class ChoiceEvent:
    """What one choice produced from a piece (choice stage), to send as a chunk."""

    content: str = ""
    tool_calls: tuple[DeltaToolCall, ...] = ()
    reasoning: str = ""
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass
class ChoiceResult:
    """The finished choice. ``content`` None when the model only called tools."""

    content: str | None
    tool_calls: list[ToolCall | CustomToolCall] | None
    finish_reason: str
    validation: SchemaValidation | None
    reasoning: str | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None  # answer tokens, when asked for
    stop: str | None = None  # the client's stop string that ended it (finish_reason "stop")


@dataclass(frozen=True)
class ChoiceStep:
    """A piece routed through a choice: the events to send, in order, and the result
    once the piece was the last one."""

    events: tuple[ChoiceEvent, ...] = ()
    result: ChoiceResult | None = None


@dataclass(frozen=True)
class FinishedChoice:
    """One choice done: what the client sees, the engine's token counts, reasoning tokens."""

    result: ChoiceResult
    counts: EngineDelta
    reasoning_tokens: int
    schema_attempts: int = 0  # generations run when the output was validated and resampled, else 0

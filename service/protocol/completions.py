"""Pydantic models of the OpenAI (legacy) completions wire format: ``POST /v1/completions``.

Strict as the chat models are (unknown fields are a 400 naming them). The output
constraints and the other servers' sampling fields are the chat request's.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.protocol.openai import BootstrapFields, ResponseFormat, StreamOptions, StructuredOutputs, Usage


class CompletionRequest(BootstrapFields):
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's default for this endpoint
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    n: int = 1
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    suffix: None = None  # not supported: accepted as null only
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    regex: str | None = None
    ebnf: str | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class Completion(BaseModel):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None

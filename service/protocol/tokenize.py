"""Pydantic models of ``POST /tokenize`` and ``POST /detokenize`` (also under ``/v1/``), in the
shapes vLLM and SGLang share.

Strict as the chat models are (unknown fields are a 400 naming them). Where the two differ,
both are accepted: a ``prompt`` list (SGLang's batch) beside vLLM's one text, ``tokens`` as a
list of lists (SGLang) beside one list; detokenize answers both names of the text (vLLM's
``prompt``, SGLang's ``text``). The chat fields that shape the rendered prompt are the chat
request's own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from service.protocol.openai import ChatMessage, CustomTool, Tool, ToolChoice, _Strict


class TokenizeRequest(_Strict):
    model: str | None = None
    prompt: str | list[str] | None = None
    messages: list[ChatMessage] | None = None
    # with messages: what the chat route renders from besides them
    tools: list[Tool | CustomTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    enable_thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    add_special_tokens: bool | None = None  # default: true for a prompt, false for messages (vLLM)
    add_generation_prompt: bool | None = None  # messages: true (the chat route's rendering) only
    return_token_strs: bool | None = None


class TokenizeResponse(BaseModel):
    count: int | list[int]
    max_model_len: int
    tokens: list[int] | list[list[int]]
    token_strs: list[str] | list[list[str]] | None = None


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[int] | list[list[int]]
    skip_special_tokens: bool = False


class DetokenizeResponse(BaseModel):
    prompt: str | list[str]  # vLLM's name
    text: str | list[str]  # SGLang's name, the same value

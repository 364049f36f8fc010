"""``/tokenize`` and ``/detokenize``: text or a chat conversation -> token ids, and back.

Chat ``messages`` become a ``ChatCompletionRequest`` and go through the chat pipeline's own
validate and prompt stages (``ChatPipeline.prompt_ids``): the ids are exactly the prompt a chat
completion of the same messages, tools and reasoning settings sends to the engine, so ``count``
equals its ``usage.prompt_tokens``. A ``prompt`` is encoded as it is (with the tokenizer's
special tokens unless ``add_special_tokens`` is false, as vLLM and SGLang do). Token ids outside
the vocabulary are a 400 naming the id's place.
"""

from __future__ import annotations

from typing import Any

from service.errors import InvalidRequestError, ModelNotFoundError, UnsupportedParameterError
from service.pipeline.chat import ChatPipeline
from service.protocol.openai import ChatCompletionRequest
from service.protocol.tokenize import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from service.types.ports import ChatTemplate
from service.types.serving import ServingLimits

# what the chat route renders from besides the messages: only meaningful with ``messages``
CHAT_FIELDS = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "enable_thinking",
    "chat_template_kwargs",
    "reasoning_effort",
)


def tokenize(req: TokenizeRequest, pipeline: ChatPipeline) -> TokenizeResponse:
    limits, template = pipeline.limits, pipeline.template
    if req.messages is not None:
        if req.prompt is not None:
            raise InvalidRequestError("give 'prompt' (a text) or 'messages' (a conversation), not both", param="prompt")
        batch = [list(pipeline.prompt_ids(chat_request(req, limits.served_model_name)))]
    else:
        check_model(req.model, limits)
        texts = _texts(req)
        special = req.add_special_tokens is not False
        batch = [template.encode(text, add_special_tokens=special) for text in texts]
    strs = [template.token_strs(ids) for ids in batch] if req.return_token_strs else None
    if isinstance(req.prompt, list):  # SGLang's batch: one list per text
        return TokenizeResponse(
            count=[len(ids) for ids in batch], max_model_len=limits.context_length, tokens=batch, token_strs=strs
        )
    return TokenizeResponse(
        count=len(batch[0]), max_model_len=limits.context_length, tokens=batch[0], token_strs=strs[0] if strs else None
    )


def _texts(req: TokenizeRequest) -> list[str]:
    if req.prompt is None:
        raise InvalidRequestError("give 'prompt' (a text) or 'messages' (a conversation)", param="prompt")
    for name in CHAT_FIELDS + ("add_generation_prompt",):
        if getattr(req, name) is not None:
            raise InvalidRequestError(
                f"'{name}' shapes the chat template's rendering of 'messages'; leave it out with 'prompt'", param=name
            )
    if isinstance(req.prompt, list) and not req.prompt:
        raise InvalidRequestError("'prompt' is an empty list; give a text or a list of texts", param="prompt")
    return [req.prompt] if isinstance(req.prompt, str) else req.prompt


def chat_request(req: TokenizeRequest, served_model: str) -> ChatCompletionRequest:
    """The chat request whose prompt ``req.messages`` asks for (param paths are the chat request's)."""
    if req.add_special_tokens:
        raise UnsupportedParameterError(
            "'add_special_tokens' true is not supported with 'messages': the chat template writes the model's "
            "special tokens itself; send false or leave it out",
            param="add_special_tokens",
        )
    if req.add_generation_prompt is False:
        raise UnsupportedParameterError(
            "'add_generation_prompt' false is not supported: messages are rendered as the chat route renders "
            "them, with the generation prompt; send true or leave it out",
            param="add_generation_prompt",
        )
    payload: dict[str, Any] = {"model": req.model or served_model, "messages": req.messages}
    payload |= {name: getattr(req, name) for name in CHAT_FIELDS if getattr(req, name) is not None}
    return ChatCompletionRequest.model_validate(payload)


def detokenize(req: DetokenizeRequest, template: ChatTemplate, limits: ServingLimits) -> DetokenizeResponse:
    check_model(req.model, limits)
    nested = [ids for ids in req.tokens if isinstance(ids, list)]
    batch: list[tuple[list[Any], str]] = (
        [(ids, f"tokens.{i}") for i, ids in enumerate(nested)] if nested else [(list(req.tokens), "tokens")]
    )  # SGLang's batch: one text per list
    texts = [template.decode(_in_vocab(ids, where, limits.vocab_size), req.skip_special_tokens) for ids, where in batch]
    text: str | list[str] = texts if nested else texts[0]
    return DetokenizeResponse(prompt=text, text=text)


def _in_vocab(ids: Any, where: str, vocab_size: int | None) -> list[int]:
    for j, token in enumerate(ids):
        if token < 0 or (vocab_size is not None and token >= vocab_size):
            raise InvalidRequestError(
                f"'{where}.{j}' is the token id {token}, outside this model's vocabulary [0, {vocab_size})",
                param=f"{where}.{j}",
            )
    return list(ids)


def check_model(model: str | None, limits: ServingLimits) -> None:
    if model is not None and model != limits.served_model_name:
        raise ModelNotFoundError(
            f"model '{model}' is not served here; use '{limits.served_model_name}' (see GET /v1/models)",
            param="model",
        )

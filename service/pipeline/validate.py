"""Validate stage: protocol request -> ValidatedRequest, or a typed 400 naming the parameter.

It also resolves what the later stages need from the served model: the tool-call format
(on ``ToolRequest``; a server without one refuses tools) and the reasoning setup (on
``ReasoningRequest``), so no later stage looks anything up again."""

from __future__ import annotations

from dataclasses import replace

from service.errors import InvalidRequestError, ModelNotFoundError, UnsupportedParameterError
from service.pipeline.validate_bootstrap import bootstrap_of
from service.pipeline.validate_output_spec import output_spec
from service.pipeline.validate_reasoning import template_kwargs, validate_reasoning
from service.pipeline.validate_tools import check_tool_results, tool_calls_of, validate_tools
from service.protocol.completions import CompletionRequest
from service.protocol.openai import ChatCompletionRequest, ChatMessage
from service.types.plan import Bootstrap, SamplingOptions
from service.types.request import JsonOutputSpec, Message, PatternOutputSpec, ValidatedRequest
from service.types.serving import ModelFormats, ServingLimits

MAX_STOP_SEQUENCES = 4


def validate_request(
    req: ChatCompletionRequest, limits: ServingLimits, formats: ModelFormats = ModelFormats()
) -> ValidatedRequest:
    """Check everything that does not need the tokenizer; normalise the messages."""
    if req.model != limits.served_model_name:
        raise ModelNotFoundError(
            f"model '{req.model}' is not served here; use '{limits.served_model_name}' (see GET /v1/models)",
            param="model",
        )
    max_tokens, param = _max_tokens(req)
    output = output_spec(req)
    return ValidatedRequest(
        model=req.model,
        messages=_messages(req.messages),
        sampling=replace(_sampling(req), skip_special_tokens=not formats.output.keep_special),
        max_tokens=max_tokens,
        max_tokens_param=param,
        n=_n(req.n, limits.max_n),
        stream=req.stream,
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
        json_output=output if isinstance(output, JsonOutputSpec) else None,
        pattern_output=output if isinstance(output, PatternOutputSpec) else None,
        tools=validate_tools(req, formats.tools),
        allow_schema_loosening=req.allow_schema_loosening,
        reasoning=validate_reasoning(req, limits.reasoning, formats.reasoning, max_tokens, param),
        template_kwargs=template_kwargs(req, formats.reasoning),
        logprobs=_logprobs(req),
        bootstrap=bootstrap_of(req, limits.disaggregation, req.n),
    )


def validate_completion(req: CompletionRequest, limits: ServingLimits) -> ValidatedRequest:
    """The checks of ``POST /v1/completions`` (the prompt itself is the prompt stage's)."""
    if req.model != limits.served_model_name:
        raise ModelNotFoundError(
            f"model '{req.model}' is not served here; use '{limits.served_model_name}' (see GET /v1/models)",
            param="model",
        )
    if req.max_tokens is not None and req.max_tokens < 1:
        raise InvalidRequestError(f"'max_tokens' must be at least 1, got {req.max_tokens}", param="max_tokens")
    if req.echo and req.stream and req.logprobs is not None:
        raise UnsupportedParameterError(
            "'echo' with 'logprobs' is not supported when streaming; drop one of them or set 'stream': false",
            param="echo",
        )
    output = output_spec(req)
    return ValidatedRequest(
        model=req.model,
        messages=(),
        sampling=_sampling(req),
        max_tokens=req.max_tokens,
        max_tokens_param="max_tokens",
        n=_n(req.n, limits.max_n),
        stream=req.stream,
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
        json_output=output if isinstance(output, JsonOutputSpec) else None,
        pattern_output=output if isinstance(output, PatternOutputSpec) else None,
        logprobs=req.logprobs,
        prompt_param="prompt",
        echo=req.echo,
        bootstrap=_completion_bootstrap(req, limits.disaggregation),
    )


def _messages(messages: list[ChatMessage]) -> tuple[Message, ...]:
    if not messages:
        raise InvalidRequestError("'messages' must contain at least one message", param="messages")
    out: list[Message] = []
    call_ids: set[str] = set()
    for i, msg in enumerate(messages):
        calls = tool_calls_of(msg, i)
        call_ids.update(call.id for call in calls)
        if msg.role == "tool":
            check_tool_results(call_ids, msg, i)
        reasoning = _reasoning_of(msg, i)
        content = "" if (calls or reasoning is not None) and msg.content is None else _text(msg, i)
        role = "system" if msg.role == "developer" else msg.role
        out.append(Message(role, content, msg.name, msg.tool_call_id, calls, reasoning))
    if all(m.role == "system" for m in out):
        raise InvalidRequestError("'messages' holds only system messages; add a user message", param="messages")
    return tuple(out)


def _reasoning_of(msg: ChatMessage, index: int) -> str | None:
    """The reasoning of an assistant message sent back as history (``reasoning_content`` and
    ``reasoning`` carry the same text, as this server returns them); it goes to the template."""
    given = {f: v for f in ("reasoning_content", "reasoning") if (v := getattr(msg, f)) is not None}
    if given and msg.role != "assistant":
        field = next(iter(given))
        raise InvalidRequestError(
            f"messages[{index}] has '{field}' but role '{msg.role}'; only assistant messages carry reasoning",
            param=f"messages.{index}.{field}",
        )
    if len(set(given.values())) > 1:
        raise InvalidRequestError(
            f"messages[{index}].reasoning_content and .reasoning differ; send one of them (or the same text)",
            param=f"messages.{index}.reasoning",
        )
    return next(iter(given.values()), None)


def _text(msg: ChatMessage, index: int) -> str:
    if msg.content is None:
        raise InvalidRequestError(
            f"messages[{index}].content is missing; give the message text",
            param=f"messages.{index}.content",
        )
    if isinstance(msg.content, str):
        return msg.content
    return "".join(part.text for part in msg.content)


def _max_tokens(req: ChatCompletionRequest) -> tuple[int | None, str]:
    if req.max_tokens is not None and req.max_completion_tokens is not None:
        if req.max_tokens != req.max_completion_tokens:
            raise InvalidRequestError(
                "'max_tokens' and 'max_completion_tokens' disagree; send only one",
                param="max_completion_tokens",
            )
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    value = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if value is not None and value < 1:
        raise InvalidRequestError(f"'{param}' must be at least 1, got {value}", param=param)
    return value, param


def _sampling(req: ChatCompletionRequest | CompletionRequest) -> SamplingOptions:
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    if len(stop) > MAX_STOP_SEQUENCES:
        raise InvalidRequestError(
            f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stop)}",
            param="stop",
        )
    if any(s == "" for s in stop):
        raise InvalidRequestError("'stop' sequences must not be empty strings", param="stop")
    return SamplingOptions(
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        stop=stop,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        top_k=-1 if not req.top_k else req.top_k,  # vLLM: 0 and -1 both mean all tokens
        min_p=req.min_p or 0.0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
    )


def _logprobs(req: ChatCompletionRequest) -> int | None:
    """How many top alternatives to return per token (None: no logprobs)."""
    if req.top_logprobs is not None and not req.logprobs:
        raise InvalidRequestError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return (req.top_logprobs or 0) if req.logprobs else None


def _n(n: int, max_n: int) -> int:
    if not 1 <= n <= max_n:
        raise UnsupportedParameterError(f"'n' must be between 1 and {max_n} on this server, got {n}", param="n")
    return n


def _completion_bootstrap(req: CompletionRequest, mode: str | None) -> Bootstrap | None:
    """``bootstrap_of`` for completions: in PD mode the prompt must be one prompt (one transfer)."""
    bootstrap = bootstrap_of(req, mode, req.n)
    prompts = req.prompt if isinstance(req.prompt, list) and req.prompt and not isinstance(req.prompt[0], int) else [0]
    if bootstrap is not None and len(prompts) != 1:
        raise UnsupportedParameterError(
            f"'prompt' must be one prompt on a {mode} replica (one prefill/decode transfer per request), "
            f"got {len(prompts)}",
            param="prompt",
        )
    return bootstrap

"""Pydantic models of the OpenAI chat-completions wire format (shapes only, no logic).

Requests forbid unknown fields: a parameter this server does not implement is a 400
naming it, never silently dropped. Request fields are strict, as OpenAI's are: no
coercion ("yes" is not a boolean, "5" and 5.0 are not integers, "0.5" is not a number;
an integer is a valid number).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class CustomCall(_Strict):
    name: str
    input: str


class CustomToolCall(_Strict):
    """A call of a ``custom`` tool: its ``input`` is free text (or text of the tool's grammar)."""

    id: str
    type: Literal["custom"] = "custom"
    custom: CustomCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall | CustomToolCall] | None = None
    # an assistant message this server returned, sent back as history (agent loops): the
    # reasoning fields it carries go to the chat template (the validate stage checks the role)
    reasoning_content: str | None = None
    reasoning: str | None = None
    # what the openai client adds when it dumps a returned message (``.model_dump()``): this
    # server never produces them, so they are accepted as null only
    refusal: None = None
    annotations: None = None
    audio: None = None
    function_call: None = None


TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class FunctionDef(_Strict):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class CustomGrammar(_Strict):
    definition: str
    syntax: Literal["lark", "regex"]


class CustomFormatGrammar(_Strict):
    type: Literal["grammar"]
    grammar: CustomGrammar


class CustomFormatText(_Strict):
    type: Literal["text"]


class CustomToolDef(_Strict):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    format: CustomFormatText | CustomFormatGrammar | None = None


class CustomTool(_Strict):
    """OpenAI's ``custom`` tool: the call's input is text, enforced by the grammar when one is given."""

    type: Literal["custom"]
    custom: CustomToolDef


class FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: FunctionName


class NamedCustomToolChoice(_Strict):
    type: Literal["custom"]
    custom: FunctionName


class AllowedToolRef(_Strict):
    type: Literal["function"]
    function: FunctionName


class AllowedTools(_Strict):
    mode: Literal["auto", "required"]
    tools: list[AllowedToolRef]


class AllowedToolsChoice(_Strict):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice | NamedCustomToolChoice | AllowedToolsChoice


class StreamOptions(_Strict):
    include_usage: bool = False


class JSONSchemaSpec(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """OpenAI's types, plus the structserve extensions ``regex``, ``choice`` and ``grammar``
    (the same constraints as ``structured_outputs``; docs/api.md)."""

    type: Literal["text", "json_object", "json_schema", "regex", "choice", "grammar"]
    json_schema: JSONSchemaSpec | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None


class StructuredOutputs(_Strict):
    """vLLM's ``structured_outputs``: exactly one of these constraints."""

    json_: dict[str, Any] | bool | str | None = Field(None, alias="json")
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None


class BootstrapFields(_Strict):
    """What SGLang's gateway (smg ``--pd-disaggregation``) adds to a request it sends to a
    prefill and a decode replica: where the prefill side's KV is announced and the transfer's
    id. Accepted only by a replica in a PD mode (``engine.disaggregation.mode``)."""

    bootstrap_host: str | None = None
    bootstrap_port: int | None = Field(None, ge=1, le=65535)
    bootstrap_room: int | None = Field(None, ge=0, lt=1 << 63)


class ChatCompletionRequest(BootstrapFields):
    model: str
    messages: list[ChatMessage]
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool | CustomTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # reasoning: on/off (also chat_template_kwargs.enable_thinking), effort, exact budget
    enable_thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    max_reasoning_tokens: int | None = Field(
        None,
        validation_alias=AliasChoices(
            "max_reasoning_tokens", "max_thinking_tokens", "thinking_token_budget", "thinking_budget"
        ),
    )
    # structserve extension: accept schema keywords the grammar cannot enforce exactly
    # (they are dropped from the grammar; the output is still validated against them).
    allow_schema_loosening: bool | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # other servers' names (docs/api.md, "Field names of other servers")
    top_k: int | None = Field(None, ge=-1)  # vLLM/SGLang: -1 or 0 = all tokens
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    structured_outputs: StructuredOutputs | None = None  # vLLM
    regex: str | None = None  # SGLang
    ebnf: str | None = None  # SGLang


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprobOut] | None
    refusal: None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] | None = None
    completion_tokens_details: dict[str, int] | None = None
    schema_attempts: int | None = None  # generations run to get schema-valid outputs (resampling)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the same text, under the name newer clients read
    tool_calls: list[ToolCall | CustomToolCall] | None = None


class SchemaValidation(BaseModel):
    """structserve extension on a choice: the post-validation of JSON output."""

    valid: bool
    error: str | None = None
    # unknown keywords of the schema (annotations under JSON Schema 2020-12), ignored for
    # generation and validation, as "keyword at /pointer" (a tool's: "name: keyword at ...")
    ignored_keywords: list[str] | None = None

    @model_serializer(mode="wrap")
    def _only_named_keywords(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)  # ignored_keywords appears only when there are some
        if isinstance(data, dict) and data.get("ignored_keywords") is None:
            data.pop("ignored_keywords", None)
        return data


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None
    schema_validation: SchemaValidation | None = None
    stop_reason: str | None = None  # vLLM's field: the stop string that ended the choice


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class DeltaFunction(BaseModel):
    name: str | None = None
    arguments: str | None = None


class DeltaCustom(BaseModel):
    name: str | None = None
    input: str | None = None


class DeltaToolCall(BaseModel):
    """First delta of a call: index, id, type, name (arguments ""); later: argument fragments.
    A custom tool's call has ``custom`` (name, then input fragments) instead of ``function``."""

    index: int
    id: str | None = None
    type: Literal["function", "custom"] | None = None
    function: DeltaFunction | None = None
    custom: DeltaCustom | None = None


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None
    schema_validation: SchemaValidation | None = None
    stop_reason: str | None = None  # vLLM's field: the stop string that ended the choice


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "structserve"
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody

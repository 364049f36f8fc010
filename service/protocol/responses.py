"""Pydantic models of the OpenAI Responses API request and its items (shapes only, no logic).

As in ``service/protocol/openai.py``, the request forbids unknown fields and coerces
nothing. Items are discriminated by ``type`` (a message may leave it out, as OpenAI's
``EasyInputMessage``); the union tags are class names, which the HTTP error map drops from
``param``, so a wrong item is reported as ``input.3.call_id``, not under a tag.

The output items (``service/protocol/responses_output.py``) are subclasses of the input
items with their ids required: an item this server returned is valid input as it is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag

from service.protocol.openai import TOOL_NAME_PATTERN


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, serialize_by_alias=True)


def type_discriminator(tags: dict[str, str]) -> Any:
    """A discriminator picking a union member (by its tag) from the ``type`` field."""

    def pick(value: Any) -> str | None:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return tags.get(kind) if isinstance(kind, str) else None

    names = ", ".join(tags)
    return Discriminator(pick, custom_error_type="invalid_type", custom_error_message=f"'type' must be one of {names}")


def _text_or(tag: str) -> Any:
    return Discriminator(lambda value: "Text" if isinstance(value, str) else tag)


ItemStatus = Literal["in_progress", "completed", "incomplete"]


# --- content parts -------------------------------------------------------------------------


class InputText(_Strict):
    type: Literal["input_text"] = "input_text"
    text: str


class TopLogprob(_Strict):
    token: str
    bytes: list[int]
    logprob: float


class Logprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class OutputText(_Strict):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[dict[str, Any]] = []  # never produced here; accepted back (and ignored)
    logprobs: list[Logprob] | None = None


class ReasoningText(_Strict):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class SummaryText(_Strict):
    type: Literal["summary_text"] = "summary_text"
    text: str


AssistantPart = Annotated[
    Annotated[InputText, Tag("InputText")] | Annotated[OutputText, Tag("OutputText")],
    type_discriminator({"input_text": "InputText", "output_text": "OutputText"}),
]


# --- input items ---------------------------------------------------------------------------


class MessageItem(_Strict):
    """A user, system or developer message."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer"]
    content: Annotated[Annotated[str, Tag("Text")] | Annotated[list[InputText], Tag("Parts")], _text_or("Parts")]
    id: str | None = None
    status: ItemStatus | None = None


class AssistantMessageItem(_Strict):
    """An earlier assistant answer (also the output message, sent back)."""

    type: Literal["message"] = "message"
    role: Literal["assistant"]
    content: Annotated[Annotated[str, Tag("Text")] | Annotated[list[AssistantPart], Tag("Parts")], _text_or("Parts")]
    id: str | None = None
    status: ItemStatus | None = None


class ReasoningItem(_Strict):
    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    summary: list[SummaryText]
    content: list[ReasoningText] | None = None
    encrypted_content: None = None  # `include: ["reasoning.encrypted_content"]` is not supported
    status: ItemStatus | None = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str
    id: str | None = None
    status: ItemStatus | None = None


class CustomToolCallItem(_Strict):
    type: Literal["custom_tool_call"] = "custom_tool_call"
    call_id: str
    name: str
    input: str
    id: str | None = None


class CustomToolCallOutputItem(_Strict):
    type: Literal["custom_tool_call_output"] = "custom_tool_call_output"
    call_id: str
    output: str
    id: str | None = None


def _item_tag(value: Any) -> str | None:
    """The union member of an input item: by ``type``; a message may leave ``type`` out."""
    if isinstance(value, dict):
        kind, role = value.get("type", "message" if "role" in value else None), value.get("role")
    else:
        kind, role = getattr(value, "type", None), getattr(value, "role", None)
    if kind == "message":
        return "AssistantMessageItem" if role == "assistant" else "MessageItem"
    return _ITEM_TAGS.get(kind) if isinstance(kind, str) else None


_ITEM_TAGS = {
    "reasoning": "ReasoningItem",
    "function_call": "FunctionCallItem",
    "function_call_output": "FunctionCallOutputItem",
    "custom_tool_call": "CustomToolCallItem",
    "custom_tool_call_output": "CustomToolCallOutputItem",
}
ITEM_TYPES = ("message", *_ITEM_TAGS)

InputItem = Annotated[
    Annotated[MessageItem, Tag("MessageItem")]
    | Annotated[AssistantMessageItem, Tag("AssistantMessageItem")]
    | Annotated[ReasoningItem, Tag("ReasoningItem")]
    | Annotated[FunctionCallItem, Tag("FunctionCallItem")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutputItem")]
    | Annotated[CustomToolCallItem, Tag("CustomToolCallItem")]
    | Annotated[CustomToolCallOutputItem, Tag("CustomToolCallOutputItem")],
    Discriminator(
        _item_tag,
        custom_error_type="invalid_item",
        custom_error_message=f"unknown input item; 'type' must be one of {', '.join(ITEM_TYPES)}",
    ),
]


# --- tools, tool choice, text format, reasoning --------------------------------------------


class FunctionTool(_Strict):
    type: Literal["function"] = "function"
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(_Strict):
    type: Literal["text"] = "text"


class GrammarFormat(_Strict):
    type: Literal["grammar"] = "grammar"
    syntax: Literal["lark", "regex"]
    definition: str


class CustomTool(_Strict):
    type: Literal["custom"] = "custom"
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    format: (
        Annotated[
            Annotated[TextFormat, Tag("TextFormat")] | Annotated[GrammarFormat, Tag("GrammarFormat")],
            type_discriminator({"text": "TextFormat", "grammar": "GrammarFormat"}),
        ]
        | None
    ) = None


ResponsesTool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")] | Annotated[CustomTool, Tag("CustomTool")],
    type_discriminator({"function": "FunctionTool", "custom": "CustomTool"}),
]


class NamedTool(_Strict):
    type: Literal["function", "custom"]
    name: str


class AllowedToolsChoice(_Strict):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[NamedTool]


ResponsesToolChoice = Literal["none", "auto", "required"] | NamedTool | AllowedToolsChoice


class JsonObjectFormat(_Strict):
    type: Literal["json_object"] = "json_object"


class JsonSchemaFormat(_Strict):
    type: Literal["json_schema"] = "json_schema"
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    schema_: dict[str, Any] | bool = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: Annotated[
        Annotated[TextFormat, Tag("TextFormat")]
        | Annotated[JsonObjectFormat, Tag("JsonObjectFormat")]
        | Annotated[JsonSchemaFormat, Tag("JsonSchemaFormat")],
        type_discriminator(
            {"text": "TextFormat", "json_object": "JsonObjectFormat", "json_schema": "JsonSchemaFormat"}
        ),
    ] = TextFormat()


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ReasoningConfig(_Strict):
    effort: ReasoningEffort | None = None
    # no summaries are written: "auto" allows none; "concise"/"detailed" are refused (400)
    summary: Literal["auto", "concise", "detailed"] | None = None
    max_tokens: int | None = None  # structserve extension: the exact reasoning budget


Includable = Literal["message.output_text.logprobs"]  # the only `include` value supported
MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class ResponsesRequest(_Strict):
    model: str
    input: Annotated[Annotated[str, Tag("Text")] | Annotated[list[InputItem], Tag("Items")], _text_or("Items")]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    tools: list[ResponsesTool] | None = None
    tool_choice: ResponsesToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool = False
    store: bool = False
    previous_response_id: str | None = None
    include: list[Includable] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    metadata: dict[MetadataKey, MetadataValue] | None = Field(None, max_length=16)
    user: str | None = None
    seed: int | None = None  # structserve extension (as in chat)
    # SGLang/vLLM sampling extensions, as in chat (SGLang's gateway, smg, sends them on every request)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    priority: Literal[0] | None = None  # SGLang's priority scheduling is off: only the default 0
    truncation: Literal["disabled"] | None = None
    # what smg adds in PD mode (service.protocol.openai.BootstrapFields), passed to the chat request
    bootstrap_host: str | None = None
    bootstrap_port: int | None = Field(None, ge=1, le=65535)
    bootstrap_room: int | None = Field(None, ge=0, lt=1 << 63)

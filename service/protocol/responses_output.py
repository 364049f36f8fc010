"""Pydantic models of what ``POST /v1/responses`` returns: the ``Response`` object and the
semantic stream events (shapes only, no logic; ``service/fronts/responses/`` builds them).

Every object here parses with the ``openai`` package's ``Response`` / ``ResponseStreamEvent``
types (tests/unit/service/test_responses_protocol.py). The output items subclass the input
items of ``service/protocol/responses.py`` with their ids required, so a returned item is
valid input (history) as it is.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Tag

from service.protocol.responses import (
    AssistantMessageItem,
    CustomToolCallItem,
    FunctionCallItem,
    ItemStatus,
    OutputText,
    ReasoningConfig,
    ReasoningItem,
    ReasoningText,
    ResponsesTool,
    ResponsesToolChoice,
    SummaryText,
    TextConfig,
    type_discriminator,
)

ResponseStatus = Literal["completed", "incomplete", "in_progress"]


class ResponseReasoningItem(ReasoningItem):
    id: str
    summary: list[SummaryText] = []  # no summaries are written
    content: list[ReasoningText]


class ResponseOutputMessage(AssistantMessageItem):
    id: str
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputText]  # type: ignore[assignment]  # narrowed: what this server writes


class ResponseFunctionToolCall(FunctionCallItem):
    id: str
    status: ItemStatus


class ResponseCustomToolCall(CustomToolCallItem):
    id: str


OutputItem = Annotated[
    Annotated[ResponseReasoningItem, Tag("ResponseReasoningItem")]
    | Annotated[ResponseOutputMessage, Tag("ResponseOutputMessage")]
    | Annotated[ResponseFunctionToolCall, Tag("ResponseFunctionToolCall")]
    | Annotated[ResponseCustomToolCall, Tag("ResponseCustomToolCall")],
    type_discriminator(
        {
            "reasoning": "ResponseReasoningItem",
            "message": "ResponseOutputMessage",
            "function_call": "ResponseFunctionToolCall",
            "custom_tool_call": "ResponseCustomToolCall",
        }
    ),
]


class _Out(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)


class InputTokensDetails(_Out):
    cached_tokens: int = 0


class OutputTokensDetails(_Out):
    reasoning_tokens: int = 0


class ResponseUsage(_Out):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(_Out):
    reason: Literal["max_output_tokens", "content_filter"]


class Response(_Out):
    """The Responses object; the request fields OpenAI echoes are echoed (defaults filled in)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    error: None = None
    incomplete_details: IncompleteDetails | None = None
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_logprobs: int | None = None
    tools: list[ResponsesTool] = []
    tool_choice: ResponsesToolChoice = "auto"
    parallel_tool_calls: bool = True
    text: TextConfig = TextConfig()
    reasoning: ReasoningConfig = ReasoningConfig()
    previous_response_id: str | None = None
    store: bool = False
    background: bool = False
    truncation: Literal["disabled"] = "disabled"
    metadata: dict[str, str] = {}
    user: str | None = None


# --- stream events (each carries a ``sequence_number``, from 0, increasing by 1) -------------


class _Event(_Out):
    sequence_number: int


class ResponseLifecycleEvent(_Event):
    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete"]
    response: Response


class OutputItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class ContentPartEvent(_Event):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText = Field(discriminator="type")


class DeltaTopLogprob(_Out):
    token: str
    logprob: float


class DeltaLogprob(_Out):
    token: str
    logprob: float
    top_logprobs: list[DeltaTopLogprob]


class OutputTextDeltaEvent(_Event):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[DeltaLogprob] = []


class OutputTextDoneEvent(_Event):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[DeltaLogprob] = []


class ReasoningTextDeltaEvent(_Event):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDoneEvent(_Event):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str


class ArgumentsDeltaEvent(_Event):
    """``response.function_call_arguments.delta`` or ``response.custom_tool_call_input.delta``."""

    type: Literal["response.function_call_arguments.delta", "response.custom_tool_call_input.delta"]
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDoneEvent(_Event):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    name: str
    arguments: str


class CustomToolCallInputDoneEvent(_Event):
    type: Literal["response.custom_tool_call_input.done"] = "response.custom_tool_call_input.done"
    item_id: str
    output_index: int
    input: str


class ErrorEvent(_Event):
    """An error after the stream began (the OpenAI ``error`` event)."""

    type: Literal["error"] = "error"
    code: str | None
    message: str
    param: str | None


ResponseStreamEvent = (
    ResponseLifecycleEvent
    | OutputItemEvent
    | ContentPartEvent
    | OutputTextDeltaEvent
    | OutputTextDoneEvent
    | ReasoningTextDeltaEvent
    | ReasoningTextDoneEvent
    | ArgumentsDeltaEvent
    | FunctionCallArgumentsDoneEvent
    | CustomToolCallInputDoneEvent
    | ErrorEvent
)

"""A finished ``ChatCompletion`` (one choice) -> the Responses ``Response`` object.

Output order: the reasoning item (``reasoning_content``), the message (its text; also an
empty one when there is nothing else to return), then one item per tool call. A
``finish_reason`` of "length" makes the response ``incomplete`` (``max_output_tokens``), and
the last item with it. ``ResponseEventStream`` builds its final response with the same
builder, so streamed and non-streamed responses agree.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Literal

from service.protocol.openai import ChatCompletion, ChoiceLogprobs, CustomToolCall, ToolCall, Usage
from service.protocol.responses import (
    ItemStatus,
    Logprob,
    OutputText,
    ReasoningConfig,
    ReasoningText,
    ResponsesRequest,
    TextConfig,
    TopLogprob,
)
from service.protocol.responses_output import (
    DeltaLogprob,
    DeltaTopLogprob,
    IncompleteDetails,
    InputTokensDetails,
    OutputItem,
    OutputTokensDetails,
    Response,
    ResponseCustomToolCall,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseStatus,
    ResponseUsage,
)

IncompleteReason = Literal["max_output_tokens", "content_filter"]
_INCOMPLETE: dict[str, IncompleteReason] = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def outcome(finish_reason: str | None) -> tuple[ResponseStatus, IncompleteReason | None]:
    """The response status (and incomplete reason) for a chat finish reason."""
    reason = _INCOMPLETE.get(finish_reason or "")
    return ("incomplete" if reason else "completed"), reason


def usage_of(usage: Usage) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=(usage.prompt_tokens_details or {}).get("cached_tokens", 0)
        ),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=(usage.completion_tokens_details or {}).get("reasoning_tokens", 0)
        ),
        total_tokens=usage.total_tokens,
    )


def output_logprobs(logprobs: ChoiceLogprobs | None) -> list[Logprob]:
    """Chat logprobs -> the ``logprobs`` of an ``output_text`` part."""
    return [
        Logprob(
            token=t.token,
            bytes=t.bytes or [],
            logprob=t.logprob,
            top_logprobs=[TopLogprob(token=o.token, bytes=o.bytes or [], logprob=o.logprob) for o in t.top_logprobs],
        )
        for t in (logprobs.content or [] if logprobs is not None else [])
    ]


def delta_logprobs(logprobs: Sequence[Logprob]) -> list[DeltaLogprob]:
    """The same logprobs in the shape of ``response.output_text.delta`` / ``.done`` events."""
    return [
        DeltaLogprob(
            token=t.token,
            logprob=t.logprob,
            top_logprobs=[DeltaTopLogprob(token=o.token, logprob=o.logprob) for o in t.top_logprobs],
        )
        for t in logprobs
    ]


class ResponseBuilder:
    """Builds the items and the ``Response`` of one request; ``new_id`` makes every id
    (``resp_``, ``rs_``, ``msg_``, ``fc_``, ``ctc_`` + hex), once per item."""

    def __init__(
        self,
        request: ResponsesRequest,
        *,
        response_id: str | None = None,
        created_at: int | None = None,
        new_id: Callable[[str], str] = new_id,
    ):
        self.request = request
        self.new_id = new_id
        self.id = response_id or new_id("resp")
        self.created_at = int(time.time()) if created_at is None else created_at

    def response(
        self,
        output: list[OutputItem],
        status: ResponseStatus,
        *,
        reason: IncompleteReason | None = None,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> Response:
        r = self.request
        return Response(
            id=self.id,
            created_at=self.created_at,
            status=status,
            incomplete_details=IncompleteDetails(reason=reason) if reason else None,
            model=model or r.model,
            output=output,
            usage=usage_of(usage) if usage is not None else None,
            instructions=r.instructions,
            max_output_tokens=r.max_output_tokens,
            temperature=1.0 if r.temperature is None else r.temperature,
            top_p=1.0 if r.top_p is None else r.top_p,
            top_logprobs=r.top_logprobs,
            tools=r.tools or [],
            tool_choice=r.tool_choice or "auto",
            parallel_tool_calls=True if r.parallel_tool_calls is None else r.parallel_tool_calls,
            text=r.text or TextConfig(),
            reasoning=r.reasoning or ReasoningConfig(),
            previous_response_id=r.previous_response_id,
            store=r.store,
            metadata=r.metadata or {},
            user=r.user,
        )

    def finish(
        self, output: list[OutputItem], finish_reason: str | None, usage: Usage | None, model: str | None = None
    ) -> Response:
        """The final response: status from the finish reason; when incomplete, the last item too."""
        status, reason = outcome(finish_reason)
        if reason and output and isinstance(output[-1], ResponseOutputMessage | ResponseFunctionToolCall):
            output = [*output[:-1], output[-1].model_copy(update={"status": "incomplete"})]
        return self.response(output, status, reason=reason, usage=usage, model=model)

    def reasoning_item(self, text: str | None, item_id: str | None = None) -> ResponseReasoningItem:
        """The reasoning item (``text`` None: as first announced, without content)."""
        content = [] if text is None else [ReasoningText(text=text)]
        return ResponseReasoningItem(id=item_id or self.new_id("rs"), content=content)

    def message_item(
        self, text: str | None, logprobs: list[Logprob], status: ItemStatus, item_id: str | None = None
    ) -> ResponseOutputMessage:
        """The message (``text`` None: as first announced, without content)."""
        content = [] if text is None else [OutputText(text=text, logprobs=logprobs)]
        return ResponseOutputMessage(id=item_id or self.new_id("msg"), status=status, content=content)

    def function_call_item(
        self, call_id: str, name: str, arguments: str, status: ItemStatus, item_id: str | None = None
    ) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            id=item_id or self.new_id("fc"), call_id=call_id, name=name, arguments=arguments, status=status
        )

    def custom_call_item(
        self, call_id: str, name: str, text: str, item_id: str | None = None
    ) -> ResponseCustomToolCall:
        return ResponseCustomToolCall(id=item_id or self.new_id("ctc"), call_id=call_id, name=name, input=text)

    def call_item(self, call: ToolCall | CustomToolCall) -> OutputItem:
        """A chat tool call -> a ``function_call`` (or ``custom_tool_call``) item."""
        if isinstance(call, CustomToolCall):
            return self.custom_call_item(call.id, call.custom.name, call.custom.input)
        return self.function_call_item(call.id, call.function.name, call.function.arguments, "completed")

    def from_completion(self, completion: ChatCompletion) -> Response:
        choice = completion.choices[0]
        message = choice.message
        output: list[OutputItem] = []
        if message.reasoning_content:
            output.append(self.reasoning_item(message.reasoning_content))
        calls = message.tool_calls or []
        if message.content or not calls:
            output.append(self.message_item(message.content or "", output_logprobs(choice.logprobs), "completed"))
        output.extend(self.call_item(call) for call in calls)
        return self.finish(output, choice.finish_reason, completion.usage, completion.model)

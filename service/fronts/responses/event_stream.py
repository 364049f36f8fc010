"""Streamed ``ChatCompletionChunk``s (one choice; usage on the last) -> the Responses
semantic events, in the order the OpenAI SDK's stream accumulator expects:

    response.created, response.in_progress,
    per item: response.output_item.added
      reasoning / message: response.content_part.added, *.delta…, *.done, response.content_part.done
      function call: response.function_call_arguments.delta…, …done (custom: custom_tool_call_input)
    response.output_item.done;
    response.completed (or response.incomplete, finish_reason "length")

An item opens when the deltas switch to its kind (reasoning, text, a new tool call index)
and closes when the next one opens or at ``finish``. Ids are made once, by the
``ResponseBuilder``, which also builds the final response (equal to ``from_completion`` of
the same content).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from service.errors import ConversionError
from service.fronts.responses.build_response import (
    ResponseBuilder,
    delta_logprobs,
    outcome,
    output_logprobs,
)
from service.protocol.openai import ChatCompletionChunk, DeltaToolCall, Usage
from service.protocol.responses import Logprob, OutputText, ReasoningText
from service.protocol.responses_output import (
    ArgumentsDeltaEvent,
    ContentPartEvent,
    CustomToolCallInputDoneEvent,
    ErrorEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItem,
    OutputItemEvent,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    ReasoningTextDeltaEvent,
    ReasoningTextDoneEvent,
    ResponseCustomToolCall,
    ResponseFunctionToolCall,
    ResponseLifecycleEvent,
    ResponseOutputMessage,
    ResponseStreamEvent,
)

CallKind = Literal["function_call", "custom_tool_call"]
Kind = Literal["reasoning", "message"] | CallKind
_DELTA_TYPE: dict[CallKind, str] = {
    "function_call": "response.function_call_arguments.delta",
    "custom_tool_call": "response.custom_tool_call_input.delta",
}
_ANSWERS = (ResponseOutputMessage, ResponseFunctionToolCall, ResponseCustomToolCall)


@dataclass
class _Open:
    """The item being streamed: its place, id, text so far (and, for a call, which one)."""

    kind: Kind
    index: int
    item_id: str
    parts: list[str] = field(default_factory=list)
    logprobs: list[Logprob] = field(default_factory=list)
    call_index: int | None = None
    call_id: str = ""
    name: str = ""

    @property
    def text(self) -> str:
        return "".join(self.parts)


class ResponseEventStream:
    def __init__(self, builder: ResponseBuilder):
        self._builder = builder
        self._seq = 0
        self._started = False
        self._output: list[OutputItem] = []
        self._open: _Open | None = None
        self._calls: set[int] = set()  # chat tool-call indexes seen
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._model: str | None = None

    def _event(self, cls: Any, **fields: Any) -> ResponseStreamEvent:
        event: ResponseStreamEvent = cls(sequence_number=self._seq, **fields)
        self._seq += 1
        return event

    def start(self) -> list[ResponseStreamEvent]:
        """response.created and response.in_progress (once; ``feed`` calls it if needed)."""
        if self._started:
            return []
        self._started = True
        skeleton = self._builder.response([], "in_progress")
        return [
            self._event(ResponseLifecycleEvent, type="response.created", response=skeleton),
            self._event(ResponseLifecycleEvent, type="response.in_progress", response=skeleton),
        ]

    def feed(self, chunk: ChatCompletionChunk) -> list[ResponseStreamEvent]:
        events = self.start()
        self._model = chunk.model
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices:  # one choice (n is 1)
            delta = choice.delta
            if reasoning := delta.reasoning_content or delta.reasoning:
                events += self._text("reasoning", reasoning, [])
            if delta.content:
                events += self._text("message", delta.content, output_logprobs(choice.logprobs))
            for call in delta.tool_calls or ():
                events += self._call(call)
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
        return events

    def finish(self) -> list[ResponseStreamEvent]:
        """Close the last item and send response.completed (or response.incomplete)."""
        events = self.start()
        if not any(isinstance(i, _ANSWERS) for i in self._output):  # as from_completion: an empty answer
            events += self._close()
            self._open_text("message", events)
        status, _ = outcome(self._finish_reason)
        events += self._close("incomplete" if status == "incomplete" else "completed")
        response = self._builder.finish(self._output, self._finish_reason, self._usage, self._model)
        kind = "response.incomplete" if response.status == "incomplete" else "response.completed"
        return events + [self._event(ResponseLifecycleEvent, type=kind, response=response)]

    def error(self, message: str, code: str | None = None, param: str | None = None) -> list[ResponseStreamEvent]:
        """The ``error`` event for a failure after the stream began."""
        return [self._event(ErrorEvent, message=message, code=code, param=param)]

    # --- items -------------------------------------------------------------------------

    def _added(self, item: OutputItem) -> ResponseStreamEvent:
        self._output.append(item)
        return self._event(
            OutputItemEvent, type="response.output_item.added", output_index=len(self._output) - 1, item=item
        )

    def _part(self, which: str, item: _Open, part: OutputText | ReasoningText) -> ResponseStreamEvent:
        return self._event(
            ContentPartEvent,
            type=f"response.content_part.{which}",
            item_id=item.item_id,
            output_index=item.index,
            content_index=0,
            part=part,
        )

    def _open_text(self, kind: Literal["reasoning", "message"], events: list[ResponseStreamEvent]) -> _Open:
        """Open a text item; its added events go onto ``events``."""
        b = self._builder
        item = b.reasoning_item(None) if kind == "reasoning" else b.message_item(None, [], "in_progress")
        events.append(self._added(item))
        self._open = opened = _Open(kind, len(self._output) - 1, item.id)
        part = ReasoningText(text="") if kind == "reasoning" else OutputText(text="", logprobs=[])
        events.append(self._part("added", opened, part))
        return opened

    def _text(
        self, kind: Literal["reasoning", "message"], delta: str, logprobs: list[Logprob]
    ) -> list[ResponseStreamEvent]:
        item = self._open
        events: list[ResponseStreamEvent] = []
        if item is None or item.kind != kind:
            events = self._close()
            item = self._open_text(kind, events)
        item.parts.append(delta)
        item.logprobs += logprobs
        where = {"item_id": item.item_id, "output_index": item.index, "content_index": 0}
        if kind == "reasoning":
            return events + [self._event(ReasoningTextDeltaEvent, delta=delta, **where)]
        return events + [self._event(OutputTextDeltaEvent, delta=delta, logprobs=delta_logprobs(logprobs), **where)]

    def _call(self, call: DeltaToolCall) -> list[ResponseStreamEvent]:
        events: list[ResponseStreamEvent] = []
        kind, name, fragment = _call_delta(call)
        item = self._open
        if call.index not in self._calls:
            events += self._close()
            item = self._open_call(call, kind, name, events)
        elif item is None or item.call_index != call.index:
            raise ConversionError(f"tool call {call.index} got a fragment after the next item began")
        if fragment:
            item.parts.append(fragment)
            where = {"item_id": item.item_id, "output_index": item.index}
            events.append(self._event(ArgumentsDeltaEvent, type=_DELTA_TYPE[kind], delta=fragment, **where))
        return events

    def _open_call(
        self, call: DeltaToolCall, kind: CallKind, name: str | None, events: list[ResponseStreamEvent]
    ) -> _Open:
        """A new call: its first fragment carries the id and the name; its added event goes onto ``events``."""
        self._calls.add(call.index)
        if not call.id or not name:
            raise ConversionError(f"tool call {call.index} began without an id and a name")
        b = self._builder
        item: OutputItem = (
            b.custom_call_item(call.id, name, "")
            if kind == "custom_tool_call"
            else b.function_call_item(call.id, name, "", "in_progress")
        )
        events.append(self._added(item))
        self._open = opened = _Open(
            kind, len(self._output) - 1, item.id, call_index=call.index, call_id=call.id, name=name
        )
        return opened

    def _close(self, status: Literal["completed", "incomplete"] = "completed") -> list[ResponseStreamEvent]:
        """The done events of the open item; its final form replaces the announced one."""
        o, self._open = self._open, None
        if o is None:
            return []
        b, where = self._builder, {"item_id": o.item_id, "output_index": o.index}
        events: list[ResponseStreamEvent]
        if o.kind == "reasoning":
            item: OutputItem = b.reasoning_item(o.text, o.item_id)
            events = [self._event(ReasoningTextDoneEvent, text=o.text, content_index=0, **where)]
            events.append(self._part("done", o, ReasoningText(text=o.text)))
        elif o.kind == "message":
            item = b.message_item(o.text, o.logprobs, status, o.item_id)
            logprobs = delta_logprobs(o.logprobs)
            events = [self._event(OutputTextDoneEvent, text=o.text, logprobs=logprobs, content_index=0, **where)]
            events.append(self._part("done", o, OutputText(text=o.text, logprobs=o.logprobs)))
        elif o.kind == "function_call":
            item = b.function_call_item(o.call_id, o.name, o.text, status, o.item_id)
            events = [self._event(FunctionCallArgumentsDoneEvent, name=o.name, arguments=o.text, **where)]
        else:
            item = b.custom_call_item(o.call_id, o.name, o.text, o.item_id)
            events = [self._event(CustomToolCallInputDoneEvent, input=o.text, **where)]
        self._output[o.index] = item
        return events + [
            self._event(OutputItemEvent, type="response.output_item.done", output_index=o.index, item=item)
        ]


def _call_delta(call: DeltaToolCall) -> tuple[CallKind, str | None, str]:
    """(kind, name, text fragment) of a chat tool-call delta (custom: ``custom`` instead of ``function``)."""
    if call.custom is not None:
        return "custom_tool_call", call.custom.name, call.custom.input or ""
    function = call.function
    return "function_call", function.name if function else None, (function.arguments if function else None) or ""

"""A finished ``ChatCompletion`` (one choice) -> an Anthropic ``Message``; streamed
``ChatCompletionChunk``s -> Anthropic's stream events.

Content order: a ``thinking`` block (the reasoning), a ``text`` block (when there is text),
then one ``tool_use`` block per call (ids ``toolu_<hex>``, ``input`` the parsed arguments).
The stream opens a block when the deltas switch kind and closes it when the next opens or at
the end, so the SDK's accumulated message equals the non-streamed one:

    message_start, ping, per block: content_block_start, content_block_delta…, content_block_stop,
    message_delta (stop_reason, stop_sequence, usage), message_stop
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_core import from_json

from service.errors import ConversionError
from service.protocol.anthropic import Message, MessageUsage, OutputBlock, OutText, OutThinking, OutToolUse, StopReason
from service.protocol.openai import ChatCompletion, ChatCompletionChunk, DeltaToolCall, ToolCall, Usage

_STOP: dict[str, StopReason] = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
Kind = Literal["thinking", "text", "tool_use"]


def tool_use_id(call_id: str) -> str:
    """The ``toolu_`` id of a chat call id (``call_<hex>`` -> ``toolu_<hex>``). An id the model's
    format names itself (Kimi-K2's ``functions.NAME:N``, which its template renders back into the
    history) is kept as it is."""
    return "toolu_" + call_id.removeprefix("call_") if call_id.startswith("call_") else call_id


def usage_of(usage: Usage | None) -> MessageUsage:
    if usage is None:
        return MessageUsage(input_tokens=0, output_tokens=0)
    cached = (usage.prompt_tokens_details or {}).get("cached_tokens", 0)
    return MessageUsage(
        input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens, cache_read_input_tokens=cached
    )


def stop_of(finish_reason: str | None, stop_sequence: str | None) -> StopReason | None:
    if finish_reason == "stop" and stop_sequence is not None:
        return "stop_sequence"
    return _STOP.get(finish_reason or "", "end_turn" if finish_reason else None)


def parse_input(arguments: str) -> dict[str, Any]:
    """The ``input`` object of a call's arguments; a call cut short by max_tokens keeps its
    complete members, as the SDK's stream accumulator parses the same fragments."""
    try:
        value = from_json(arguments, allow_partial=True)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def from_completion(completion: ChatCompletion, message_id: str) -> Message:
    choice = completion.choices[0]
    stop_sequence = choice.stop_reason
    message = choice.message
    content: list[OutputBlock] = []
    if message.reasoning_content:
        content.append(OutThinking(thinking=message.reasoning_content))
    if message.content:
        content.append(OutText(text=message.content))
    for call in message.tool_calls or ():
        if not isinstance(call, ToolCall):  # the conversion offers function tools only
            raise ConversionError(f"the custom tool call {call.custom.name!r} has no Messages block")
        content.append(
            OutToolUse(id=tool_use_id(call.id), name=call.function.name, input=parse_input(call.function.arguments))
        )
    return Message(
        id=message_id,
        model=completion.model,
        content=content,
        stop_reason=stop_of(choice.finish_reason, stop_sequence),
        stop_sequence=stop_sequence if choice.finish_reason == "stop" else None,
        usage=usage_of(completion.usage),
    )


@dataclass
class _Block:
    kind: Kind
    index: int
    call_index: int | None = None


@dataclass
class MessageEventStream:
    """Chunks in, Anthropic event payloads (dicts with ``type``) out."""

    message_id: str
    model: str
    _open: _Block | None = None
    _count: int = 0
    _finish: str | None = None
    _stop: str | None = None
    _usage: Usage | None = None
    _calls: set[int] = field(default_factory=set)

    def start(self) -> list[dict[str, Any]]:
        skeleton = Message(
            id=self.message_id, model=self.model, content=[], stop_reason=None, usage=usage_of(None)
        ).model_dump()
        return [{"type": "message_start", "message": skeleton}, {"type": "ping"}]

    def feed(self, chunk: ChatCompletionChunk) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        self.model = chunk.model
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices:  # one choice (n is 1)
            delta = choice.delta
            if reasoning := delta.reasoning_content or delta.reasoning:
                events += self._delta("thinking", {"type": "thinking_delta", "thinking": reasoning})
            if delta.content:
                events += self._delta("text", {"type": "text_delta", "text": delta.content})
            for call in delta.tool_calls or ():
                events += self._call(call)
            if choice.finish_reason is not None:
                self._finish, self._stop = choice.finish_reason, choice.stop_reason
        return events

    def finish(self) -> list[dict[str, Any]]:
        usage = usage_of(self._usage)
        stop = self._stop if self._finish == "stop" else None
        delta = {"stop_reason": stop_of(self._finish, stop), "stop_sequence": stop}
        return self._close() + [
            {"type": "message_delta", "delta": delta, "usage": usage.model_dump()},
            {"type": "message_stop"},
        ]

    def _begin(
        self, kind: Kind, content: dict[str, Any], call_index: int | None = None
    ) -> tuple[list[dict[str, Any]], _Block]:
        events = self._close()
        self._open = block = _Block(kind, self._count, call_index)
        self._count += 1
        return events + [{"type": "content_block_start", "index": block.index, "content_block": content}], block

    def _delta(self, kind: Kind, delta: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        block = self._open
        if block is None or block.kind != kind:
            empty = OutThinking(thinking="") if kind == "thinking" else OutText(text="")
            events, block = self._begin(kind, empty.model_dump())
        return events + [{"type": "content_block_delta", "index": block.index, "delta": delta}]

    def _call(self, call: DeltaToolCall) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        name = call.function.name if call.function else None
        block = self._open
        if call.index not in self._calls:
            self._calls.add(call.index)
            if not call.id or not name:
                raise ConversionError(f"tool call {call.index} began without an id and a name")
            content = OutToolUse(id=tool_use_id(call.id), name=name, input={}).model_dump()
            events, block = self._begin("tool_use", content, call.index)
        elif block is None or block.call_index != call.index:
            raise ConversionError(f"tool call {call.index} got a fragment after the next block began")
        fragment = (call.function.arguments if call.function else None) or ""
        if fragment:
            delta = {"type": "input_json_delta", "partial_json": fragment}
            events.append({"type": "content_block_delta", "index": block.index, "delta": delta})
        return events

    def _close(self) -> list[dict[str, Any]]:
        block, self._open = self._open, None
        return [] if block is None else [{"type": "content_block_stop", "index": block.index}]


def error_event(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}

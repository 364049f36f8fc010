"""Choice stage: one choice's output as the client sees it: reasoning, content, tool calls,
finish reason, checks.

``ChoiceOutput.take`` is given the generate stage's pieces (one piece with all the text,
or piece by piece while streaming), routes each by its phase and yields what to send; the
non-streaming response is assembled from the very same events, so streaming and non-streaming agree by construction.
With tools (``tool_choice`` other than ``none``) the text goes through the model
format's streaming parser: calls become ``tool_calls`` (ids ``call_<hex>``, or as the format
names them: ``ToolFormat.make_call_id``), the
rest is content.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from grammars.lark import InputStream
from runtime_ext.formats import ReasoningFormat
from runtime_ext.parsers import ParseEvent, ReasoningEvent, ReasoningParser, ToolCallParser
from service.output_text import OutputText
from service.pipeline.schema_validation import validate_calls, validate_output, with_ignored
from service.protocol.openai import (
    CustomCall,
    CustomToolCall,
    DeltaCustom,
    DeltaFunction,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
)
from service.types.plan import DecodeConstraint
from service.types.request import ToolRequest
from service.types.results import ChoiceEvent, ChoiceResult, ChoiceStep, Piece, TokenLogprob


@dataclass
class _Call:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    decoder: InputStream | None = None  # a custom tool's call: its input decoded from the arguments
    decoded: list[str] = field(default_factory=list)

    def made(self) -> ToolCall | CustomToolCall:
        if self.decoder is None:
            return ToolCall(id=self.id, function=FunctionCall(name=self.name, arguments="".join(self.arguments)))
        return CustomToolCall(id=self.id, custom=CustomCall(name=self.name, input="".join(self.decoded)))

    def opening(self, index: int) -> DeltaToolCall:
        if self.decoder is None:
            return DeltaToolCall(
                index=index, id=self.id, type="function", function=DeltaFunction(name=self.name, arguments="")
            )
        return DeltaToolCall(index=index, id=self.id, type="custom", custom=DeltaCustom(name=self.name, input=""))

    def more(self, index: int, fragment: str) -> DeltaToolCall | None:
        self.arguments.append(fragment)
        if self.decoder is None:
            return DeltaToolCall(index=index, function=DeltaFunction(arguments=fragment))
        text = self.decoder.feed(fragment)
        self.decoded.append(text)
        return DeltaToolCall(index=index, custom=DeltaCustom(input=text)) if text else None


def _content_parser(text: OutputText, custom: bool) -> ToolCallParser | None:
    """Without tools, content framed by message headers (Harmony's ``<|channel|>final<|message|>``)
    still goes through its format's parser, which knows no tool and drops the headers."""
    if text.content_format is None or custom:
        return None
    return ToolCallParser(text.content_format, (), {})


class ChoiceOutput:
    """One choice's parsers and what it produced so far. ``take`` is the stage's entry;
    ``feed`` (answer text) and ``finish`` are its steps, public for tests of the parsing."""

    def __init__(
        self,
        constraint: DecodeConstraint | None,
        tools: ToolRequest | None,
        reasoning: ReasoningFormat | None = None,
        logprobs: bool = False,
        text: OutputText = OutputText(),
    ):
        self.text = text  # the special tokens stripped from the engine's text, the format framing content
        self.constraint = constraint
        self.logprobs: list[TokenLogprob] | None = [] if logprobs else None
        self.thinking = ReasoningParser(reasoning, in_reasoning=True) if reasoning is not None else None
        self.custom = tools.forced_custom if tools is not None else None  # the answer is its input
        self.tools = tools if tools is not None and tools.mode != "none" and self.custom is None else None
        self.parser = (
            ToolCallParser(self.tools.format, self.tools.allowed, {t.name: t.parameters for t in self.tools.tools})
            if self.tools is not None
            else _content_parser(text, self.custom is not None)
        )
        self.content: list[str] = []
        self.calls: dict[int, _Call] = {}

    def take(self, piece: Piece) -> ChoiceStep:
        """Route a piece by its phase; the last piece (finish reason set) also finishes the
        choice: its events are the piece's, then what the parsers held back."""
        text, reason = self.text.clean(piece.delta.text), piece.delta.finish_reason
        feed = self._feed_reasoning if piece.phase == "reasoning" else self.feed
        events = (feed(text),) if text else ()
        if self.logprobs is not None and piece.phase == "answer" and piece.delta.logprobs:
            self.logprobs += piece.delta.logprobs  # the chunk that carries this increment's text carries them
            first = events[0] if events else ChoiceEvent()
            events = (replace(first, logprobs=piece.delta.logprobs),) + events[1:]
        if reason is None:
            return ChoiceStep(events)
        event, result = self.finish(reason)
        matched = piece.delta.matched_stop
        result.stop = matched if isinstance(matched, str) and result.finish_reason == "stop" else None
        result.logprobs = None if self.logprobs is None else tuple(self.logprobs)
        return ChoiceStep(events + (event,), result)

    def _feed_reasoning(self, text: str) -> ChoiceEvent:
        """Text of the reasoning phase (the block the prompt opened); without a reasoning
        format there is no block, and the text is answer text."""
        if self.thinking is None:
            return self.feed(text)
        event = self.thinking.feed(text)
        if event.content:
            return self._both(event)
        return ChoiceEvent(reasoning=self.text.clean_reasoning(event.reasoning))

    def _both(self, event: ReasoningEvent) -> ChoiceEvent:
        answer = self.feed(event.content)
        return ChoiceEvent(answer.content, answer.tool_calls, self.text.clean_reasoning(event.reasoning))

    def feed(self, text: str) -> ChoiceEvent:
        if self.custom is not None:
            return self._custom_input(text)
        if self.parser is None:
            self.content.append(text)
            return ChoiceEvent(content=text)
        return self._event(self.parser.feed(text))

    def finish(self, finish_reason: str) -> tuple[ChoiceEvent, ChoiceResult]:
        early = ChoiceEvent()
        if self.thinking is not None:  # reasoning held back (a partial end marker) is reasoning
            flushed = self.thinking.finish()
            reasoning = self.text.clean_reasoning(flushed.reasoning)
            early = self._both(flushed) if flushed.content else ChoiceEvent(reasoning=reasoning)
        event = self._event(self.parser.finish()) if self.parser is not None else ChoiceEvent()
        result = self._result(finish_reason)
        if self.thinking is not None:
            result.reasoning = self.text.clean_reasoning(self.thinking.result().reasoning)
        merged = ChoiceEvent(early.content + event.content, early.tool_calls + event.tool_calls, early.reasoning)
        return merged, result

    def _event(self, parsed: ParseEvent) -> ChoiceEvent:
        deltas = []
        for d in parsed.calls:
            if d.name is not None:
                custom = self.tools is not None and d.name in self.tools.custom_names
                call = _Call(self._call_id(d.name, d.index), d.name, decoder=InputStream() if custom else None)
                self.calls[d.index] = call
                deltas.append(call.opening(d.index))
            elif (delta := self.calls[d.index].more(d.index, d.arguments)) is not None:
                deltas.append(delta)
        if parsed.content:
            self.content.append(parsed.content)
        return ChoiceEvent(parsed.content, tuple(deltas))

    def _call_id(self, name: str, index: int) -> str:
        if self.tools is None:
            return f"call_{uuid.uuid4().hex[:24]}"
        return self.tools.format.make_call_id(name, self.tools.calls_before + index)

    def _custom_input(self, text: str) -> ChoiceEvent:
        """The forced custom call: its first delta names it, then input fragments follow."""
        first = not self.calls
        if first:
            self.calls[0] = _Call(f"call_{uuid.uuid4().hex[:24]}", self.custom.name if self.custom else "")
        call = self.calls[0]
        call.arguments.append(text)
        delta = DeltaToolCall(
            index=0,
            id=call.id if first else None,
            type="custom" if first else None,
            custom=DeltaCustom(name=call.name if first else None, input=text),
        )
        return ChoiceEvent(tool_calls=(delta,))

    def _custom_result(self, finish_reason: str) -> ChoiceResult:
        call = self.calls.get(0) or _Call(f"call_{uuid.uuid4().hex[:24]}", self.custom.name if self.custom else "")
        made = CustomToolCall(id=call.id, custom=CustomCall(name=call.name, input="".join(call.arguments)))
        return ChoiceResult(None, [made], "tool_calls" if finish_reason == "stop" else finish_reason, None)

    def _result(self, finish_reason: str) -> ChoiceResult:
        if self.custom is not None:
            return self._custom_result(finish_reason)
        text = "".join(self.content)
        calls = [c.made() for _, c in sorted(self.calls.items())]
        if self.parser is None or self.tools is None:  # a parser exists exactly when tools do
            validated = with_ignored(validate_output(text, self.constraint, finish_reason), self.constraint)
            return ChoiceResult(text, None, finish_reason, validated)
        complete = len(self.parser.result().calls)
        validation = validate_calls(calls, complete, self.tools.schema_of, finish_reason)
        if text.strip() or not calls:
            validation = validate_output(text, self.constraint, finish_reason) or validation
        if complete and finish_reason == "stop":
            finish_reason = "tool_calls"
        validation = with_ignored(validation, self.constraint)
        return ChoiceResult(text or (None if calls else ""), calls or None, finish_reason, validation)

"""The one event-stream loop every front door uses (``FrontEvents``), with the real Messages and
Responses event streams: a failure after the start is the front's error event naming the
front's field, the chunks are closed, and ``before_finish`` sees the final events (its failure
also ends the stream)."""

from __future__ import annotations

import asyncio

from service.errors import ContextLengthError, StoreUnavailableError
from service.fronts.base import FrontEvents, front_params
from service.fronts.messages import MessageEventStream, MessagesParamMap
from service.fronts.responses import ResponseBuilder, ResponseEventStream, ResponsesParamMap
from service.protocol.openai import ChatCompletionChunk
from service.protocol.responses import ResponsesRequest


def chunk(delta: dict, finish: str | None = None) -> ChatCompletionChunk:
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return ChatCompletionChunk.model_validate({"id": "c", "created": 0, "model": "m", "choices": choices})


class Chunks:
    """An async generator of chunks that may fail after them; records being closed."""

    def __init__(self, chunks: list[ChatCompletionChunk], fail: Exception | None = None):
        self.chunks, self.fail, self.closed = chunks, fail, False

    async def run(self):
        try:
            for c in self.chunks:
                yield c
            if self.fail is not None:
                raise self.fail
        finally:
            self.closed = True


def collect(events: FrontEvents, chunks: Chunks) -> list:
    async def go():
        return [e async for e in events.run(chunks.run())]

    return asyncio.run(go())


def message_error(exc):
    return [{"type": "error", "error": {"message": exc.message, "param": exc.param}}]


def test_a_failure_after_the_start_is_an_error_event_on_the_front_field():
    chunks = Chunks([chunk({"content": "hi"})], ContextLengthError("too long", param="max_completion_tokens"))
    events = collect(FrontEvents(MessageEventStream("msg_1", "m"), MessagesParamMap(), message_error), chunks)
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "error",
    ]
    assert events[-1]["error"]["param"] == "max_tokens" and chunks.closed


def test_before_finish_sees_the_final_events_and_its_failure_ends_the_stream():
    builder = ResponseBuilder(ResponsesRequest.model_validate({"model": "m", "input": "hi"}))
    seen = []

    async def keep(final):
        seen.extend(final)

    def error_of(stream):
        return lambda exc: stream.error(exc.message, exc.code, exc.param)

    stream = ResponseEventStream(builder)
    done = collect(
        FrontEvents(stream, ResponsesParamMap(), error_of(stream), keep), Chunks([chunk({"content": "x"}, "stop")])
    )
    assert done[-1].type == "response.completed" and seen and seen[-1] is done[-1]

    async def unreachable(final):
        raise StoreUnavailableError("the store went away", param="store")

    stream = ResponseEventStream(builder)
    failed = collect(
        FrontEvents(stream, ResponsesParamMap(), error_of(stream), unreachable), Chunks([chunk({}, "stop")])
    )
    assert failed[-1].type == "error" and failed[-1].param == "store"  # not a chat path: left as it is
    assert not any(e.type == "response.completed" for e in failed)


def test_front_params_renames_a_pipeline_error():
    try:
        with front_params(MessagesParamMap()):
            raise ContextLengthError("too long", param="max_completion_tokens")
    except ContextLengthError as exc:
        assert exc.param == "max_tokens"

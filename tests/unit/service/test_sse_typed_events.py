"""The one typed-event SSE framing the Messages and Responses routes share (``typed_events``):
``event: <type>`` then the JSON ``data:`` line, no ``[DONE]``; closing the frames closes the events
(the client going away reaches the pipeline)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from service.api.sse import typed_events


class Event(BaseModel):
    type: str
    sequence_number: int


class Source:
    """An async generator of events that records whether it was closed."""

    def __init__(self, events: list[Any]) -> None:
        self.events, self.closed = events, False

    async def run(self) -> AsyncIterator[Any]:
        try:
            for event in self.events:
                yield event
        finally:
            self.closed = True


def frames(events: list[Any]) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [frame async for frame in typed_events(Source(events).run())]

    return asyncio.run(collect())


def test_dict_and_model_events_are_framed_alike_without_done() -> None:
    out = frames([{"type": "message_start", "x": "é"}, Event(type="response.created", sequence_number=0)])
    assert len(out) == 2 and not any(b"[DONE]" in f for f in out)
    for frame, (kind, payload) in zip(
        out,
        [
            ("message_start", {"type": "message_start", "x": "é"}),
            ("response.created", {"type": "response.created", "sequence_number": 0}),
        ],
    ):
        head, data, end = frame.split(b"\n", 2)
        assert head == b"event: " + kind.encode()
        assert data.startswith(b"data: ") and json.loads(data[6:]) == payload
        assert end == b"\n"


def test_closing_the_frames_closes_the_events() -> None:
    source = Source([{"type": "a"}, {"type": "b"}])

    async def first_then_close() -> tuple[bytes, bool]:
        body = typed_events(source.run())
        first = await body.__anext__()
        await body.aclose()  # type: ignore[attr-defined]
        return first, source.closed  # read before asyncio.run's own shutdown closes leftovers

    first, closed = asyncio.run(first_then_close())
    assert first.startswith(b"event: a\n") and closed

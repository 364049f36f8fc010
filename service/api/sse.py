"""Server-sent events framing: chat completions (``data:`` frames, ``[DONE]``) and the typed-event
streams of the Messages and Responses APIs (``event: <type>`` + ``data:``)."""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator

import orjson
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from service.api.errors import client_error_body
from service.errors import ServiceError

log = logging.getLogger(__name__)
DONE = b"data: [DONE]\n\n"


def event_stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    """The HTTP response of an SSE body (no caching, no proxy buffering)."""
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


def frame(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def sse(chunks: AsyncIterator[BaseModel]) -> AsyncIterator[bytes]:
    """Frame each chunk; an error after the stream began becomes an error frame, then
    ``[DONE]``. Closing this generator (client gone) closes ``chunks``, which aborts
    the engine requests behind it."""
    try:
        async for chunk in chunks:
            yield frame(chunk.model_dump(exclude_none=False))
    except ServiceError as exc:
        log.warning("stream failed: %s", exc.message)
        yield frame(client_error_body(exc))
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    yield DONE


async def typed_events(events: AsyncIterator[dict[str, Any]] | AsyncIterator[BaseModel]) -> AsyncIterator[bytes]:
    """Each event as ``event: <its type>`` + ``data: <json>``, no ``[DONE]`` (Anthropic's Messages
    and OpenAI's Responses streams). Closing this generator (client gone) closes ``events``."""
    try:
        async for event in events:
            payload = event.model_dump() if isinstance(event, BaseModel) else event
            yield b"event: " + payload["type"].encode() + b"\n" + frame(payload)
    finally:
        await events.aclose()  # type: ignore[union-attr]

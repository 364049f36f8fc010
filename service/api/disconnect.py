"""Cancel a non-streaming request's work when its client goes away, so the engine
aborts it and frees its KV pages instead of generating for nobody."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, TypeVar

from fastapi import Request
from fastapi.responses import Response

T = TypeVar("T")
POLL_S = 0.25


class ClientDisconnected(Exception):
    """The client closed the connection before the response was ready."""


async def _wait_disconnect(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(POLL_S)


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it and raise."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise ClientDisconnected()


async def answer_unless_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """``work``'s result, or a 499 nobody reads (for logs and metrics) once the client is gone."""
    try:
        return await unless_disconnected(request, work)
    except ClientDisconnected:
        return Response(status_code=499)

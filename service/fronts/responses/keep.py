"""``store: true``: what a finished response is stored with (the conversation so far), and the
step that stores it. A response too large for the store says ``store: false``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from service.protocol.responses import InputItem, MessageItem, ResponsesRequest
from service.protocol.responses_output import Response
from service.responses_store import ResponseStore

log = logging.getLogger(__name__)


def conversation(body: ResponsesRequest, history: tuple[InputItem, ...]) -> tuple[InputItem, ...]:
    """The stored chain's inputs, then this request's."""
    inputs = (MessageItem(role="user", content=body.input),) if isinstance(body.input, str) else tuple(body.input)
    return history + inputs


@dataclass(frozen=True)
class Keeper:
    """Stores a finished response under ``owner`` (the caller's API-key owner)."""

    store: ResponseStore
    owner: str
    inputs: tuple[InputItem, ...]

    async def __call__(self, response: Response) -> None:
        if not await self.store.put(self.owner, response, self.inputs):
            log.warning(
                "response %s not stored: larger than responses.max_entry_bytes, or the store is full", response.id
            )
            response.store = False

    async def final(self, events: Sequence[BaseModel]) -> None:
        """Store the response the last streamed event carries (``response.completed``/``incomplete``)."""
        response = getattr(events[-1], "response", None) if events else None
        if isinstance(response, Response):
            await self(response)

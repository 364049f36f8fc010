"""Where ``store: true`` responses of ``POST /v1/responses`` are kept, each under its owner.

An entry is the ``Response`` (for ``GET /v1/responses/{id}``) plus the conversation it ends
(the input items of its request chain, then its output items), which a later request continues
with ``previous_response_id``; it is kept as one JSON document, whose length is what the byte
bounds count. Entries are keyed by (owner, response id), the owner being the request's API-key
owner id (``service.limits.KeyRing.owner``; ``anonymous`` without keys). A lookup under another
owner is exactly a lookup of an unknown id: the same 404, the same message (no existence oracle).

Two stores, one contract (``ResponseStore``):
- ``MemoryResponseStore``: this replica's memory. An entry expires ``ttl_s`` after it was stored
  (reads do not extend it); past ``max_total_bytes`` the oldest entries are evicted.
- ``RedisResponseStore`` (``service/responses_store_redis.py``): one Redis every replica shares,
  ``SET key value EX ttl_s``; the total is bounded by Redis's own ``maxmemory``.
An entry above ``max_entry_bytes`` is not stored: ``put`` returns False and the route answers
``store: false``. A store that cannot be reached raises ``StoreUnavailableError`` (503).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from service.errors import NotFoundError
from service.protocol.responses import InputItem
from service.protocol.responses_output import Response


@dataclass(frozen=True)
class StoredResponse:
    response: Response
    conversation: tuple[InputItem, ...]  # what a request with previous_response_id continues


class _Entry(BaseModel):
    response: Response
    conversation: list[InputItem]


def encode(response: Response, inputs: tuple[InputItem, ...]) -> bytes:
    """An entry as stored: one JSON document (its length is what the byte bounds count); its
    conversation is the request chain's inputs, then the response's output items."""
    conversation: list[InputItem] = [*inputs, *response.output]
    return _Entry(response=response, conversation=conversation).model_dump_json().encode()


def decode(data: bytes) -> StoredResponse:
    entry = _Entry.model_validate_json(data)
    return StoredResponse(entry.response, tuple(entry.conversation))


def not_found(response_id: str, param: str | None, code: str) -> NotFoundError:
    """The one 404 for an id that is unknown, expired, evicted or another API key's."""
    return NotFoundError(
        f"no stored response with id '{response_id}' for this API key (responses are stored only with "
        '"store": true, for a limited time, and only the API key that created one can read it); '
        "send the whole conversation as 'input' instead",
        param=param,
        code=code,
    )


class ResponseStore(Protocol):
    async def check(self) -> None:
        """Raises ``StoreUnavailableError`` when the store cannot be reached (before generating)."""

    async def put(self, owner: str, response: Response, inputs: tuple[InputItem, ...]) -> bool:
        """Stores the entry (the response; its conversation: ``inputs``, then its output) under
        (owner, response.id); False when it is not stored (too large, or the store is full)."""

    async def get(self, owner: str, response_id: str, param: str | None, code: str) -> StoredResponse:
        """The owner's entry, or ``not_found(response_id, param, code)``."""

    async def delete(self, owner: str, response_id: str) -> None:
        """Removes the owner's entry, or raises ``not_found(response_id, None, "response_not_found")``."""

    async def close(self) -> None: ...


class MemoryResponseStore:
    """This replica's store: (owner, id) → (expiry, JSON), oldest first. One TTL for all, so the
    oldest entry is also the first to expire: expiry and the byte bound both evict from the front."""

    def __init__(self, ttl_s: float, max_entry_bytes: int, max_total_bytes: int) -> None:
        self.ttl_s, self.max_entry_bytes, self.max_total_bytes = ttl_s, max_entry_bytes, max_total_bytes
        self.total_bytes = 0
        self._entries: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()

    async def check(self) -> None:
        return None

    async def put(self, owner: str, response: Response, inputs: tuple[InputItem, ...]) -> bool:
        data = encode(response, inputs)
        if len(data) > self.max_entry_bytes:
            return False
        self._drop((owner, response.id))
        self._entries[(owner, response.id)] = (time.monotonic() + self.ttl_s, data)
        self.total_bytes += len(data)
        self._evict(time.monotonic())
        return True

    async def get(self, owner: str, response_id: str, param: str | None, code: str) -> StoredResponse:
        self._evict(time.monotonic())
        entry = self._entries.get((owner, response_id))
        if entry is None:
            raise not_found(response_id, param, code)
        return decode(entry[1])

    async def delete(self, owner: str, response_id: str) -> None:
        self._evict(time.monotonic())
        if not self._drop((owner, response_id)):
            raise not_found(response_id, None, "response_not_found")

    async def close(self) -> None:
        self._entries.clear()
        self.total_bytes = 0

    def _drop(self, key: tuple[str, str]) -> bool:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.total_bytes -= len(entry[1])
        return entry is not None

    def _evict(self, now: float) -> None:
        """Drops expired entries and, past the byte bound, the oldest ones."""
        while self._entries:
            key, (expires, _) = next(iter(self._entries.items()))
            if expires > now and self.total_bytes <= self.max_total_bytes:
                return
            self._drop(key)

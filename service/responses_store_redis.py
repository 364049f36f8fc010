"""The shared response store: one Redis every replica uses (``responses.store: redis``).

Same contract as ``service.responses_store.MemoryResponseStore``. An entry is one string key,
``structserve:response:<owner>:<response id>`` (the owner id is a fixed-length hash, so no
response id can reach into another owner's keys), written with ``SET key json EX ttl_s``: Redis
expires it. The total is bounded by Redis's own ``maxmemory``; with ``maxmemory-policy
volatile-ttl`` (deploy/compose.yaml) Redis evicts the entries closest to expiry, i.e. the oldest,
as the memory store does. A Redis that refuses a write for memory (``noeviction``) means the
entry is not stored (``store: false``), as for one above ``max_entry_bytes``.

The asyncio client never blocks the event loop. Redis unreachable or failing (connect refused,
timeout, auth, a read-only replica) is a ``StoreUnavailableError`` (503 store_unavailable), logged
with Redis's own message; the client is told only that the store is unavailable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisError

from service.errors import StoreUnavailableError
from service.protocol.responses import InputItem
from service.protocol.responses_output import Response
from service.responses_store import StoredResponse, decode, encode, not_found

log = logging.getLogger(__name__)
KEY_PREFIX = "structserve:response:"


class RedisResponseStore:
    def __init__(self, url: str, ttl_s: int, max_entry_bytes: int, timeout_s: float) -> None:
        self.ttl_s, self.max_entry_bytes = ttl_s, max_entry_bytes
        # one immediate retry: a pooled connection that Redis closed (restart, idle timeout)
        self._redis = Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1)
        )

    @staticmethod
    def key(owner: str, response_id: str) -> str:
        return f"{KEY_PREFIX}{owner}:{response_id}"

    async def check(self) -> None:
        async with _available("check"):
            await self._redis.ping()

    async def put(self, owner: str, response: Response, inputs: tuple[InputItem, ...]) -> bool:
        data = encode(response, inputs)
        if len(data) > self.max_entry_bytes:
            return False
        try:
            async with _available("store"):
                await self._redis.set(self.key(owner, response.id), data, ex=self.ttl_s)
        except OutOfMemoryError as exc:  # maxmemory reached with a policy that does not evict
            log.warning("response %s not stored: Redis is full (%s)", response.id, exc)
            return False
        return True

    async def get(self, owner: str, response_id: str, param: str | None, code: str) -> StoredResponse:
        async with _available("read"):
            data = await self._redis.get(self.key(owner, response_id))
        if data is None:
            raise not_found(response_id, param, code)
        return decode(data)

    async def delete(self, owner: str, response_id: str) -> None:
        async with _available("delete"):
            removed = await self._redis.delete(self.key(owner, response_id))
        if not removed:
            raise not_found(response_id, None, "response_not_found")

    async def close(self) -> None:
        await self._redis.aclose()


@asynccontextmanager
async def _available(operation: str) -> AsyncIterator[None]:
    """Redis failures as a 503 (logged); a full Redis passes through for ``put`` to decide."""
    try:
        yield
    except OutOfMemoryError:
        raise
    except RedisError as exc:
        log.error("response store (Redis) unavailable for %s: %s: %s", operation, type(exc).__name__, exc)
        raise StoreUnavailableError(
            "the response store is unavailable; retry shortly, or send the whole conversation as "
            "'input' with \"store\": false (which needs no store)"
        ) from exc

"""Admission logic (pure: no fastapi, no torch): API-key check, per-key token buckets, and the
bound on running + queued requests. ``service/api/gate.py`` applies it to HTTP requests.

Contracts:
- ``KeyRing.check(header)`` returns the key id (its index, never the key) or raises
  ``AuthenticationError``; with no keys configured every request passes as key ``None``.
  ``KeyRing.owner(key id)`` is who owns what that request stores: a hash of the key (stable
  across replicas and key-list order, not reversible to the key), ``ANONYMOUS`` without keys.
- ``TokenBucket.take(key, now)`` spends one request from ``key``'s bucket (``rate`` per second,
  ``burst`` deep) or raises ``OverloadedError`` with the seconds until one is available.
- ``Admission`` lets ``max_running`` requests run; up to ``max_queued`` more wait in FIFO order
  (``acquire`` awaits); beyond that ``acquire`` raises ``OverloadedError`` at once. Every
  successful ``acquire`` must be paired with one ``release``; a waiter cancelled in the queue
  holds nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
from pathlib import Path
from typing import Sequence

from service.errors import AuthenticationError, OverloadedError

ANONYMOUS = "anonymous"  # the one owner when no API keys are configured


def load_keys(env_value: str | None, path: Path | None) -> tuple[str, ...]:
    """Keys from a comma-separated string and/or a file (one per line, ``#`` comments)."""
    keys = [k.strip() for k in (env_value or "").split(",")]
    if path is not None:
        keys += [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return tuple(k for k in keys if k)


class KeyRing:
    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = tuple(k.encode() for k in keys)
        self.owners = tuple(hashlib.sha256(b"structserve-owner\0" + k).hexdigest()[:32] for k in self.keys)

    def owner(self, key_id: int | None) -> str:
        """The owner id of the key ``check`` returned: what the request stores belongs to it."""
        return ANONYMOUS if key_id is None else self.owners[key_id]

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def check(self, authorization: str | None) -> int | None:
        if not self.keys:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError(
                "missing API key: send the header 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
            )
        given = token.strip().encode()
        for index, key in enumerate(self.keys):  # constant-time per key
            if hmac.compare_digest(given, key):
                return index
        raise AuthenticationError("invalid API key: check the key you passed in 'Authorization: Bearer <key>'")


class TokenBucket:
    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate, self.burst = per_minute / 60.0, burst
        self._state: dict[object, tuple[float, float]] = {}  # key -> (tokens, last time)

    def take(self, key: object, now: float) -> None:
        tokens, last = self._state.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1.0:
            wait = math.ceil((1.0 - tokens) / self.rate)
            self._state[key] = (tokens, now)
            raise OverloadedError(
                f"rate limit: {self.rate * 60:g} requests per minute for this key; retry in {wait} s", retry_after=wait
            )
        self._state[key] = (tokens - 1.0, now)


class Admission:
    def __init__(self, max_running: int, max_queued: int, retry_after: int = 1) -> None:
        self.max_running, self.max_queued, self.retry_after = max_running, max_queued, retry_after
        self.running = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.running < self.max_running and not self._waiters:
            self.running += 1
            return
        if len(self._waiters) >= self.max_queued:
            raise OverloadedError(
                f"server busy: {self.running} requests running and {self.queued} queued "
                f"(limit {self.max_running} + {self.max_queued}); retry later",
                retry_after=self.retry_after,
                code="server_busy",
            )
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() handed us its slot (running unchanged)
        except BaseException:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif not waiter.cancelled():
                self.release()  # the slot was handed over as we were cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1

"""An LRU cache bounded by entry count and by bytes, for caches keyed by what clients send.

A schema may be 200 KB (``SchemaLimits.max_bytes``) and its grammar text larger, so a cache
bounded only by its entry count could hold gigabytes. ``BoundedCache`` charges every entry
``size(key, value)`` bytes and evicts least recently used entries until both bounds hold; an
entry larger than the byte bound alone is not kept. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["CACHE_BYTES", "BoundedCache", "text_bytes"]

CACHE_BYTES = 64 << 20
"""Default byte bound of the grammar caches (schema, grammar and error text they keep)."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


def text_bytes(*parts: object) -> int:
    """The UTF-8 size of the ``str`` parts (other parts count 64 bytes each: small objects)."""
    return sum(len(p.encode("utf-8", "surrogatepass")) if isinstance(p, str) else 64 for p in parts)


class BoundedCache(Generic[K, V]):
    def __init__(self, max_entries: int, max_bytes: int, size: Callable[[K, V], int]) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a cache needs room for at least one entry and one byte")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._size = size
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def lookup(self, key: K) -> tuple[bool, V | None]:
        """``(True, value)`` on a hit (the entry becomes the most recent), else ``(False, None)``."""
        with self._lock:
            found = self._entries.get(key, _MISSING)
            if found is _MISSING:
                return False, None
            self._entries.move_to_end(key)
            return True, found[0]  # type: ignore[index]

    def put(self, key: K, value: V) -> None:
        cost = self._size(key, value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if cost > self.max_bytes:
                return
            self._entries[key] = (value, cost)
            self._bytes += cost
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, freed) = self._entries.popitem(last=False)
                self._bytes -= freed

    @property
    def bytes(self) -> int:
        """The bytes charged for the entries held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

"""Prefix-cache event stream for offline analysis (pure logic: no torch, no sglang).

Opt-in (``prefix_cache.events_path``; the scheduler reads ``RuntimeExtConfig.prefix_events``): one
JSON object per line, appended as the cache works:

    {"t": 1732280000.123, "event": "stored",  "ns": null, "hashes": ["9f3c…", …]}
    {"t": …,              "event": "hit",     "ns": null, "hashes": [...], "miss_tokens": 37}
    {"t": …,              "event": "removed", "ns": null, "hashes": [...]}
    {"t": …,              "event": "cleared"}

A block hash names one page *with its position*: page ``i``'s hash chains the hash of page
``i - 1`` (namespace-seeded), so equal hashes mean an equal whole prefix, as in vLLM and
SGLang's own KV events. ``stored`` lists pages that entered the tree, ``removed`` pages that
left it (eviction), ``hit`` the pages a request reused (its remaining prompt tokens were
computed). Replaying stored/removed rebuilds the tree's page set at any point.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import IO, Hashable, Sequence

HASH_HEX = 16  # 64-bit block names: enough to tell pages apart in a log


def _seed(namespace: Hashable) -> bytes:
    return hashlib.sha256(b"structserve-prefix-ns\0" + repr(namespace).encode()).digest()


def page_hashes(tokens: Sequence[int], page_size: int, namespace: Hashable = None) -> list[str]:
    """Chained hashes of the full pages of ``tokens`` (a trailing partial page is not a block)."""
    prior, out = _seed(namespace), []
    for start in range(0, len(tokens) // page_size * page_size, page_size):
        page = ",".join(str(int(t)) for t in tokens[start : start + page_size]).encode()
        prior = hashlib.sha256(prior + page).digest()
        out.append(prior.hex()[:HASH_HEX])
    return out


class EventLog:
    """Appends events to a JSON-lines stream (a file opened for append, line-buffered)."""

    def __init__(self, stream: IO[str], page_size: int) -> None:
        self.stream, self.page_size = stream, page_size

    @classmethod
    def open(cls, path: str, page_size: int) -> "EventLog":
        return cls(open(path, "a", buffering=1, encoding="utf-8"), page_size)

    def _write(self, event: str, **fields: object) -> None:
        self.stream.write(json.dumps({"t": round(time.time(), 6), "event": event, **fields}) + "\n")

    def stored(self, namespace: Hashable, tokens: Sequence[int], first_new_page: int) -> None:
        """Pages ``first_new_page…`` of ``tokens`` entered the tree."""
        hashes = page_hashes(tokens, self.page_size, namespace)[first_new_page:]
        if hashes:
            self._write("stored", ns=_name(namespace), hashes=hashes)

    def hit(self, namespace: Hashable, tokens: Sequence[int], reused: int) -> None:
        """A request reused its first ``reused`` tokens (whole pages); the rest was computed."""
        hashes = page_hashes(tokens[:reused], self.page_size, namespace)
        self._write("hit", ns=_name(namespace), hashes=hashes, miss_tokens=len(tokens) - reused)

    def removed(self, namespace: Hashable, path_tokens: Sequence[int], n_pages: int) -> None:
        """The last ``n_pages`` pages of the path ``path_tokens`` left the tree."""
        hashes = page_hashes(path_tokens, self.page_size, namespace)
        self._write("removed", ns=_name(namespace), hashes=hashes[len(hashes) - n_pages :])

    def cleared(self) -> None:
        self._write("cleared")


def _name(namespace: Hashable) -> str | None:
    return None if namespace is None else str(namespace)


def replay(lines: Sequence[str]) -> set[str]:
    """The page hashes in the tree after the given events (stored minus removed, reset on clear)."""
    present: set[str] = set()
    for line in lines:
        event = json.loads(line)
        if event["event"] == "stored":
            present.update(event["hashes"])
        elif event["event"] == "removed":
            present.difference_update(event["hashes"])
        elif event["event"] == "cleared":
            present.clear()
    return present

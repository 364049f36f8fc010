"""``structserve_combined``: SGLang's radix cache with combined-block matching (imports sglang).

Registered with ``register_radix_cache_backend``; selected by the service with
``radix_cache_backend="structserve_combined"``; ``C`` is ``RuntimeExtConfig.combine_blocks`` (set
before the engine spawns its scheduler). It is SGLang's ``RadixCache`` (its insert / lock /
evict / free contracts unchanged) with one difference: a match is cut to whole units of
``C`` pages (``C * page_size`` tokens). A read-only walk (no access time refreshed, no split)
measures the found prefix; then only the nodes up to the cut get a fresh access time, and the
node the cut falls in is split exactly at the cut, so the returned node sits at the cut and
locking it protects exactly the reused pages. The pages beyond the cut stay in the tree,
unlocked and with their old access time, like any unmatched cached pages, so LRU eviction
still sees them as unused (``touch_prefix``, which keeps a waiting request's prefix warm, does
the same). ``checkpoint`` re-matches what the request itself just inserted and must see all of
it, so it bypasses the cut.

Counters (hit / miss tokens, abandoned pages: matched pages dropped because their unit was
incomplete, evicted tokens) go to the plugin's ``PrefixStats``, reported through the plugin
report and ``/metrics``. With
``C > 1``, rejected at build time: speculative decoding (EAGLE keys are token pairs), hybrid
SWA/SSM, hierarchical cache. With ``C = 1`` and EAGLE drafting, the last matched page is dropped
so the draft model recomputes it (its hidden states are not cached). ``RuntimeExtConfig.prefix_events``
(a file path) turns on the JSON-lines event stream of ``events.py`` (stored / removed / hit).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from sglang.srt.mem_cache.base_prefix_cache import MatchResult
from sglang.srt.mem_cache.radix_cache import RadixCache

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.prefix_cache.events import EventLog
from runtime_ext.state import PrefixStats

NAME = "structserve_combined"


class CombinedRadixCache(RadixCache):
    def __init__(
        self, params: Any, combine_blocks: int, events: EventLog | None = None, stats: PrefixStats | None = None
    ) -> None:
        self.combine, self._raw_match, self.events = combine_blocks, False, events
        self.stats = stats if stats is not None else PrefixStats()
        super().__init__(params)
        self.unit = self.page_size * combine_blocks
        self.stats.backend, self.stats.combine_blocks = NAME, combine_blocks

    def _cut(self, found: int) -> int:
        """Tokens of a found prefix that may be reused: whole units; with EAGLE (per-page mode)
        one page less, so the draft recomputes the last page."""
        usable = found // self.unit * self.unit
        return usable - self.page_size if self.is_eagle and usable else usable

    def _walk(self, key: Any) -> list:
        """The nodes along the longest cached prefix of a page-aligned ``key``, each with the
        tokens of it that match. Reads only: no access time refreshed, no node split."""
        node, path = self.root_node, []
        while len(key):
            child = node.children.get(key.child_key(self.page_size))
            if child is None:
                break
            matched = child.key.match(key, page_size=self.page_size)
            path.append((child, matched))
            if matched < len(child.key):
                break
            node, key = child, key[matched:]
        return path

    def _take(self, path: list, usable: int) -> Any:
        """Refresh the access time of the nodes holding the first ``usable`` tokens of ``path``
        only, splitting the node the cut falls in (its part beyond the cut keeps its old time,
        so eviction still sees it as unused); returns the node at the cut."""
        now = time.monotonic()
        node, depth = self.root_node, 0
        node.last_access_time = now
        for child, _ in path:
            if depth >= usable:
                break
            if depth + len(child.key) > usable:
                child = self._split_node(child.key, child, usable - depth)
            child.last_access_time = now
            node, depth = child, depth + len(child.key)
        return node

    def _match_units(self, key: Any) -> tuple[int, Any]:
        """(usable tokens, node at that depth) for a page-aligned ``key``: a read-only walk
        measures the found prefix, then only the nodes up to the unit cut are touched."""
        path = self._walk(key)
        found = sum(matched for _, matched in path)
        units = found // self.unit * self.unit
        self.stats.abandoned_pages += (found - units) // self.page_size
        self.stats.draft_dropped_pages += int(self.is_eagle and units > 0)
        usable = self._cut(found)
        return usable, self._take(path, usable) if usable else None

    def match_prefix(self, params: Any) -> MatchResult:
        if self._raw_match or self.disable:
            return super().match_prefix(params)
        key, _ = params.key.maybe_to_bigram_view(self.is_eagle)
        aligned = key.page_aligned(self.page_size)
        usable, node = self._match_units(aligned) if len(aligned) else (0, None)
        self.stats.hit_tokens += usable
        self.stats.miss_tokens += len(key) - usable
        if self.events is not None:
            self.events.hit(_namespace(key), list(key.raw_token_ids()), usable)
        if usable == 0:
            return self._empty_match_result
        return MatchResult(device_prefix_len=usable, last_device_node=node, last_host_node=node, best_match_node=node)

    def insert(self, params: Any) -> Any:
        result = super().insert(params)
        if self.events is not None and not self.disable:
            key = params.key  # super() turned it into the bigram view under EAGLE
            self.events.stored(_namespace(key), list(key.raw_token_ids()), result.prefix_len // self.page_size)
        return result

    def _delete_leaf(self, node: Any) -> None:
        if self.events is not None:
            path, cursor = [], node
            while cursor is not None and cursor is not self.root_node:
                path[:0] = list(cursor.key.raw_token_ids())[: len(cursor.key)]
                cursor = cursor.parent
            self.events.removed(_namespace(node.key), path, len(node.key) // self.page_size)
        super()._delete_leaf(node)

    def reset(self) -> None:
        super().reset()
        if getattr(self, "events", None) is not None:
            self.events.cleared()

    def touch_prefix(self, key: Any) -> None:
        """A waiting request keeps warm only what its match would reuse (the whole units)."""
        key, _ = key.maybe_to_bigram_view(self.is_eagle)
        aligned = key.page_aligned(self.page_size)
        if not self.disable and len(aligned):
            path = self._walk(aligned)
            usable = self._cut(sum(matched for _, matched in path))
            if usable:
                self._take(path, usable)

    def evict(self, params: Any) -> Any:
        result = super().evict(params)
        self.stats.evicted_tokens += result.num_tokens_evicted
        return result

    def checkpoint(self, req: Any, *, up_to: int) -> None:
        self._raw_match = True
        try:
            super().checkpoint(req, up_to=up_to)
        finally:
            self._raw_match = False


def _factory(stats: PrefixStats, ctx: Any) -> Any:
    from sglang.srt.mem_cache.registry import default_radix_cache_factory

    if ctx.disable_radix_cache:
        return default_radix_cache_factory(ctx)
    p = ctx.params
    unsupported = {
        "speculative decoding (EAGLE keys)": p.is_eagle,
        "hybrid SWA": ctx.is_hybrid_swa,
        "hybrid SSM": ctx.is_hybrid_ssm,
        "hierarchical cache": ctx.enable_hierarchical_cache,
    }
    bad = [name for name, on in unsupported.items() if on]
    config = RuntimeExtConfig.from_env()
    combine = config.combine_blocks
    if bad and combine > 1:
        raise ValueError(
            f"prefix_cache backend combined with combine_blocks={combine} cannot run with "
            f"{', '.join(bad)}; use combine_blocks 1 or the sglang backend"
        )
    events = config.prefix_events
    return CombinedRadixCache(p, combine, EventLog.open(str(events), p.page_size) if events else None, stats)


def _namespace(key: Any) -> Any:
    return None if key.extra_key is None and key.cache_salt is None else (key.extra_key, key.cache_salt)


def register(stats: PrefixStats) -> None:
    from sglang.srt.mem_cache.registry import register_radix_cache_backend

    try:
        register_radix_cache_backend(NAME, partial(_factory, stats))
    except ValueError:
        pass  # already registered in this process

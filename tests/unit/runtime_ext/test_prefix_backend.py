"""The SGLang backend (CombinedRadixCache, a real sglang RadixCache subclass, no engine) agrees
with the pure matcher on random page trees: same reused pages, in whole units, and the node it
returns sits exactly at the cut (so a lock protects exactly the reused pages). Pages beyond the
cut keep their LRU time, so SGLang's own eviction (with its real page allocator) drops them first."""

from __future__ import annotations

import random

import pytest
import torch
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from runtime_ext.prefix_cache.matcher import PageRadix
from runtime_ext.prefix_cache.sglang_backend import CombinedRadixCache

P = 4


def sequences(rng: random.Random) -> list[list[int]]:
    trunks = [[rng.randrange(3) for _ in range(rng.randrange(0, 40))] for _ in range(3)]
    return [rng.choice(trunks) + [rng.randrange(3) for _ in range(rng.randrange(0, 30))] for _ in range(8)]


@pytest.mark.parametrize("combine", [1, 2, 4])
def test_backend_matches_the_oracle(combine):
    rng = random.Random(combine)
    for _ in range(40):
        stored = sequences(rng)
        cache = CombinedRadixCache(
            CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=P),
            combine,
        )
        oracle, next_id = PageRadix(P, combine), 0
        for seq in stored:
            n = len(seq) // P * P
            ids = list(range(next_id, next_id + n))
            cache.insert(InsertParams(key=RadixKey(seq[:n]), value=torch.tensor(ids, dtype=torch.int64)))
            oracle.insert(None, seq, ids[::P])  # the oracle names a page by its first token slot
            next_id += n
        for query in sequences(rng):
            result = cache.match_prefix(MatchPrefixParams(key=RadixKey(query)))
            expected = oracle.match(None, query)
            assert result.device_prefix_len == expected.tokens and result.device_prefix_len % (P * combine) == 0
            path = cache.path_device_indices(result.last_device_node).tolist()
            assert path[::P] == expected.pages  # the returned node is exactly at the cut


def test_eagle_per_page_mode_drops_the_last_matched_page():
    """EAGLE keys are token pairs; with C = 1 our cache reuses one page less than SGLang's own
    (the draft model needs the last page's hidden states, so it recomputes that page)."""
    rng = random.Random(7)
    params = dict(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=P, is_eagle=True)
    ours, upstream = CombinedRadixCache(CacheInitParams(**params), 1), RadixCache(CacheInitParams(**params))
    stored, seen = sequences(rng), set()
    for seq in stored:
        for cache in (ours, upstream):
            cache.insert(InsertParams(key=RadixKey(list(seq)), value=torch.arange(len(seq), dtype=torch.int64)))
    for query in [s[: rng.randrange(len(s) + 1)] + [rng.randrange(3)] for s in stored] + sequences(rng):
        expected = upstream.match_prefix(MatchPrefixParams(key=RadixKey(list(query)))).device_prefix_len
        got = ours.match_prefix(MatchPrefixParams(key=RadixKey(list(query)))).device_prefix_len
        assert got == max(0, expected - P)
        seen.add(expected > 0)
    assert seen == {True, False}  # both cases happened


@pytest.mark.parametrize("how", ["match", "touch"])
def test_pages_beyond_the_cut_keep_their_lru_time_and_are_evicted_first(how):
    """A match (or a waiting request's touch) that is cut at a unit boundary refreshes only the
    reused pages: the page beyond the cut keeps the time it was stored at, so eviction takes it
    before a prefix stored (used) after it."""
    allocator = PagedTokenToKVPoolAllocator(16 * P, P, torch.float32, "cpu", None, False)
    cache = CombinedRadixCache(
        CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator, page_size=P), 2
    )
    old, newer = list(range(100, 100 + 3 * P)), [7] * (2 * P)  # one unit + one page; one unit
    for seq in (old, newer):
        cache.insert(InsertParams(key=RadixKey(seq), value=allocator.alloc(len(seq))))
    stored_at = {
        name: cache.root_node.children[tuple(seq[:P])].last_access_time
        for name, seq in (("old", old), ("newer", newer))
    }
    assert stored_at["old"] < stored_at["newer"]
    query = RadixKey(old + [1] * P)  # finds 3 pages, reuses the first unit (2 pages)
    if how == "match":
        result = cache.match_prefix(MatchPrefixParams(key=query))
        assert result.device_prefix_len == 2 * P
        cache.inc_lock_ref(result.last_device_node)  # the request holds what it reuses
    else:
        cache.touch_prefix(query)
    head = cache.root_node.children[tuple(old[:P])]
    tail = head.children[tuple(old[2 * P :])]
    assert len(head.key) == 2 * P and head.last_access_time > stored_at["newer"]
    assert tail.last_access_time == stored_at["old"]  # untouched by the match
    free = allocator.available_size()
    assert cache.evict(EvictParams(num_tokens=P)).num_tokens_evicted == P
    assert tuple(old[2 * P :]) not in head.children and allocator.available_size() == free + P
    assert tuple(newer[:P]) in cache.root_node.children  # the more recently used prefix stays

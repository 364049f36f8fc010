"""The grammar caches keyed by client input are bounded by bytes as well as entries
(grammars.bounded_cache): 512 schemas of 200 KB must not pin 100 MB of text, twice."""

from __future__ import annotations

import json
from pathlib import Path

from grammars.bounded_cache import BoundedCache, text_bytes
from grammars.compile import GrammarCompiler, LarkRouter

KB = 1000


def test_entries_and_bytes_both_bound_the_cache():
    cache: BoundedCache[str, str] = BoundedCache(max_entries=3, max_bytes=100, size=text_bytes)
    for key in "abcd":
        cache.put(key, "x" * 10)
    assert "a" not in cache and len(cache) == 3  # the entry bound: least recent out
    cache = BoundedCache(max_entries=10, max_bytes=100, size=text_bytes)
    for key in "abc":
        cache.put(key, "x" * 20)  # 21 bytes each
    assert cache.lookup("a") == (True, "x" * 20)  # now the most recent
    cache.put("d", "x" * 40)
    assert "b" not in cache and all(k in cache for k in "acd")  # the byte bound: least recent out
    assert cache.bytes == 21 + 21 + 41
    cache.put("a", "x" * 200)
    assert "a" not in cache and cache.bytes == 21 + 41  # larger than the bound alone: not kept
    assert cache.lookup("nope") == (False, None)


def _big_schema(i: int, size: int) -> str:
    return json.dumps({"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * size}}})


def test_lark_router_keeps_at_most_its_bytes():
    """Schema text and its Lark grammar both count: ~200 KB schemas, 1 MB bound."""
    router = LarkRouter(Path("/nonexistent/tokenizer.json"), cache_size=512, cache_bytes=1000 * KB)
    for i in range(12):
        assert router.route("json_schema", _big_schema(i, 100 * KB)) is not None
    assert router._cache.bytes <= 1000 * KB
    assert 2 <= len(router._cache) <= 5
    assert router.route("json_schema", _big_schema(0, 2000 * KB)) is not None  # served, just not kept
    assert router._cache.bytes <= 1000 * KB


def test_compile_cache_keeps_at_most_its_bytes():
    compiler = GrammarCompiler(Path("/nonexistent"), cache_size=512, cache_bytes=1000 * KB)
    for i in range(12):
        compiler._store(("json_schema", _big_schema(i, 200 * KB)), None)
    assert compiler._cache.bytes <= 1000 * KB and len(compiler._cache) == 4
    assert compiler._lookup(("json_schema", _big_schema(11, 200 * KB)))  # the most recent is a hit

"""SGLang's grammar caches in the scheduler, bounded by entries and by bytes.

SGLang 0.5.23 keeps every grammar it built for the process's lifetime: its backend's ``cache``
(a dict keyed by ``(key type, grammar text)``, the text being a client's schema or tool set, up to
hundreds of KB) and xgrammar's ``GrammarCompiler`` cache (``cache_limit_bytes=-1``). A stream of
distinct schemas would grow both without end. Hooks on SGLang's own classes:

- ``BaseGrammarBackend.set_cache`` (AFTER): the backend's cache becomes an LRU of at most
  ``MAX_ENTRIES`` grammars and ``MAX_BYTES`` bytes, each charged its key text plus what its
  compiled form holds (xgrammar's ``CompiledGrammar.memory_size_bytes``, llguidance's serialized
  grammar); the least recently used go first. A request holds its own copy of a cached grammar,
  so an eviction never touches a running request (a later one just builds it again);
- ``BaseGrammarBackend.get_cached_or_future_value`` (BEFORE): a hit makes the entry the most recent;
- ``XGrammarGrammarBackend.__init__`` (AFTER): xgrammar's compiler cache is bounded by
  ``XGRAMMAR_CACHE_BYTES`` (xgrammar evicts by itself).

``ReasonerGrammarBackend`` (thinking models) keeps its cache through the same base methods.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "XGRAMMAR_CACHE_BYTES", "register"]

BASE = "sglang.srt.constrained.base_grammar_backend.BaseGrammarBackend"
XGRAMMAR = "sglang.srt.constrained.xgrammar_backend.XGrammarGrammarBackend"
MAX_ENTRIES = 512
MAX_BYTES = 256 << 20
XGRAMMAR_CACHE_BYTES = 128 << 20
_SIZES = "_structserve_cache_sizes"


def cost(key: Any, value: Any) -> int:
    """The bytes a cache entry holds: its key text and its compiled grammar."""
    inner = getattr(value, "grammar", None) or value  # ReasonerGrammarObject wraps the grammar
    size = sum(len(part.encode("utf-8", "surrogatepass")) for part in key if isinstance(part, str))
    compiled = getattr(inner, "ctx", None)  # XGrammarGrammar's CompiledGrammar
    size += int(getattr(compiled, "memory_size_bytes", 0) or 0)
    serialized = getattr(inner, "serialized_grammar", None)  # GuidanceGrammar
    return size + (len(serialized) if isinstance(serialized, str) else 0)


def bound(backend: Any, max_entries: int, max_bytes: int) -> None:
    """Evict the least recently used entries of ``backend.cache`` until both bounds hold."""
    cache: dict = backend.cache
    sizes: dict = backend.__dict__.setdefault(_SIZES, {})
    for key in [k for k in sizes if k not in cache]:  # dropped by SGLang itself (reset, variants)
        del sizes[key]
    for key in cache:
        if key not in sizes:
            sizes[key] = cost(key, cache[key])
    total = sum(sizes.values())
    while cache and (len(cache) > max_entries or total > max_bytes):
        oldest = next(iter(cache))
        del cache[oldest]
        total -= sizes.pop(oldest, 0)


def _after_set_cache(result: Any, backend: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> None:
    sizes = backend.__dict__.setdefault(_SIZES, {})
    sizes[key] = cost(key, value)  # a replaced entry is charged anew
    if sizes[key] > MAX_BYTES:  # larger than the bound alone: not kept (a later request builds it again)
        backend.cache.pop(key, None)
        del sizes[key]
    bound(backend, MAX_ENTRIES, MAX_BYTES)


def _touch(backend: Any, key: Any, *args: Any, **kwargs: Any) -> None:
    cache = backend.cache
    if key in cache:
        cache[key] = cache.pop(key)  # dicts keep insertion order: the end is the most recent


def _bound_xgrammar_compiler(result: Any, backend: Any, *args: Any, **kwargs: Any) -> None:
    from xgrammar import GrammarCompiler

    backend.grammar_compiler = GrammarCompiler(
        backend._tokenizer_info, cache_enabled=True, cache_limit_bytes=XGRAMMAR_CACHE_BYTES
    )


def register(hooks: Any, hook_type: Any) -> None:
    hooks.register(f"{BASE}.set_cache", _after_set_cache, hook_type.AFTER)
    hooks.register(f"{BASE}.get_cached_or_future_value", _touch, hook_type.BEFORE)
    hooks.register(f"{XGRAMMAR}.__init__", _bound_xgrammar_compiler, hook_type.AFTER)

"""runtime_ext.grammar_cache on SGLang's own XGrammarGrammarBackend (SmolLM2's tokenizer, no engine):
the scheduler's grammar cache keeps at most its entries and bytes, least recently used out, and
xgrammar's compiler cache gets a byte limit."""

from __future__ import annotations

import json

import pytest

from runtime_ext import grammar_cache


@pytest.fixture(scope="module")
def backend():
    import transformers
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    from assets import model_dir

    path = model_dir("smollm2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    built = XGrammarGrammarBackend(tokenizer, vocab, [tokenizer.eos_token_id])
    grammar_cache._bound_xgrammar_compiler(None, built)
    return built


def _schema(i: int, description: int = 0) -> str:
    return json.dumps(
        {"type": "object", "properties": {f"p{i}": {"type": "integer"}}, "description": "d" * description}
    )


def _put(backend, i: int, description: int = 0) -> tuple[str, str]:
    """Build and cache one grammar as SGLang's grammar manager does (set_cache, then the hook)."""
    key = ("json", _schema(i, description))
    value = backend.dispatch_json(key[1])
    backend.set_cache(key, value)
    grammar_cache._after_set_cache(None, backend, key, value)
    return key


def test_xgrammars_compiler_cache_has_a_byte_limit(backend):
    assert backend.grammar_compiler.cache_limit_bytes == grammar_cache.XGRAMMAR_CACHE_BYTES


def test_each_entry_is_charged_its_text_and_its_compiled_grammar(backend):
    key = ("json", _schema(0, 1000))
    value = backend.dispatch_json(key[1])
    assert grammar_cache.cost(key, value) >= len(key[1]) + value.ctx.memory_size_bytes > len(key[1])


def test_the_cache_keeps_its_entries_and_bytes_least_recently_used_out(backend, monkeypatch):
    backend.cache.clear()
    monkeypatch.setattr(grammar_cache, "MAX_ENTRIES", 3)
    keys = [_put(backend, i) for i in range(3)]
    grammar_cache._touch(backend, keys[0])  # a hit: now the most recent
    backend.get_cached_or_future_value(keys[0], False)
    keys.append(_put(backend, 3))
    assert list(backend.cache) == [keys[2], keys[0], keys[3]]  # keys[1] was the least recent

    per_entry = max(grammar_cache.cost(k, v) for k, v in backend.cache.items())
    monkeypatch.setattr(grammar_cache, "MAX_ENTRIES", 100)
    monkeypatch.setattr(grammar_cache, "MAX_BYTES", 4 * per_entry + 50_000)
    big = _put(backend, 4, description=50_000)  # its text alone is 50 KB
    assert big in backend.cache and len(backend.cache) <= 4
    total = sum(grammar_cache.cost(k, v) for k, v in backend.cache.items())
    assert total <= grammar_cache.MAX_BYTES
    huge = _put(backend, 5, description=grammar_cache.MAX_BYTES + 1)
    assert huge not in backend.cache and big in backend.cache  # larger than the bound alone: not kept

"""Which grammars go to llguidance, checked before the engine sees them.

``LarkRouter.route(kind, text)`` returns the llguidance Lark grammar to send instead of a
tool-call structural tag or a ``response_format`` JSON schema, or None to keep xgrammar:
- None when ``grammars.compile.llguidance_lark`` cannot translate it (an EBNF element; a JSON
  schema keyword outside ``ROUTED_KEYWORDS`` goes to llguidance's own JSON Schema compiler with
  strict mode written out, unless it sits under ``not``/``if``/``oneOf``);
- None when llguidance itself refuses it or warns (``LLMatcher.validate_grammar_with_warnings``
  without a tokenizer: the grammar is parsed and its JSON schemas translated, no token mask
  is built). xgrammar, behind the service's own policy, then serves it as before, so what
  llguidance cannot enforce exactly is never served loosened by it.

The one tokenizer-bound compile happens in SGLang's scheduler (``runtime_ext.grammar_route``),
lazily, so a grammar is compiled once per process pair. Results are cached (LRU, by kind and
text, bounded by entries and by bytes of text: ``grammars.bounded_cache``). Thread-safe; called
through ``asyncio.to_thread``. Imports llguidance lazily.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from grammars.bounded_cache import CACHE_BYTES, BoundedCache, text_bytes
from grammars.compile.llguidance_lark import (
    NotExpressible,
    closed_json_schema_to_lark,
    json_schema_to_lark,
    native_json_schema_to_lark,
    structural_tag_to_lark,
    text_tokens,
)

__all__ = ["LarkRouter"]

log = logging.getLogger(__name__)
_TOKEN_REFS = "no tokenizer - can't validate <[...]>"
"""The one warning that is not about the grammar: ``<[id]>`` references are checked only with a
tokenizer, and ours come from the served tokenizer's own ``tokenizer.json``."""
_REFUSED = "\0refused: "


class LarkRouter:
    def __init__(self, tokenizer_json: Path, cache_size: int = 512, cache_bytes: int = CACHE_BYTES) -> None:
        data = json.loads(tokenizer_json.read_text()) if tokenizer_json.exists() else {}
        self.tokens = text_tokens(data)
        self._cache: BoundedCache[str, str | None] = BoundedCache(cache_size, cache_bytes, text_bytes)

    def route(self, kind: str, text: str) -> str | None:
        """``kind``: ``structural_tag`` (a tool-call tag) or ``json_schema`` (the policy's
        canonical schema text); any other kind stays with xgrammar."""
        key = f"{kind}\0{text}"
        hit, lark = self._cache.lookup(key)
        if not hit:
            lark = self._checked(kind, text) if kind in ("structural_tag", "json_schema") else None
            self._cache.put(key, lark)
        return lark

    def route_native(self, text: str) -> tuple[str | None, str]:
        """The llguidance grammar for a schema xgrammar cannot enforce (``text``: the policy's
        canonical schema with ``unenforced`` keywords): llguidance's JSON Schema compiler takes
        it with no warning, or (None, why it refused). No xgrammar fallback exists for it."""
        key = f"native\0{text}"
        hit, cached = self._cache.lookup(key)
        if not hit:
            cached = self._native(text)
            self._cache.put(key, cached)
        assert cached is not None
        return (None, cached[len(_REFUSED) :]) if cached.startswith(_REFUSED) else (cached, "")

    def _native(self, text: str) -> str:
        lark = native_json_schema_to_lark(json.loads(text))
        if (objections := _objections(lark)) is not None:
            return _REFUSED + "; ".join(m.splitlines()[0] for m in objections)[:300]
        return lark

    def _checked(self, kind: str, text: str) -> str | None:
        try:
            if kind == "json_schema":
                lark = self._strict_json(json.loads(text))
            else:
                lark = structural_tag_to_lark(text, self.tokens)
        except NotExpressible as exc:
            log.debug("%s stays with xgrammar: %s", kind, exc)
            return None
        if (objections := _objections(lark)) is not None:
            log.info("%s stays with xgrammar (llguidance: %s)", kind, "; ".join(objections)[:300])
            return None
        return lark

    @staticmethod
    def _strict_json(schema: dict[str, Any]) -> str:
        """Strict mode written out: the translation for ``ROUTED_KEYWORDS``, else llguidance's
        own compiler over the same strict schema (``closed_json_schema_to_lark``)."""
        try:
            return json_schema_to_lark(schema)
        except NotExpressible:
            return closed_json_schema_to_lark(schema)


def _objections(lark: str) -> list[str] | None:
    """llguidance's errors and warnings on ``lark`` (checked without a tokenizer); None: it takes
    the grammar as it is."""
    from llguidance import LLMatcher

    is_error, messages = LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_lark(lark))
    messages = [m for m in messages if not m.startswith(_TOKEN_REFS)]
    if not is_error and not messages:
        return None
    return messages or ["llguidance refused the grammar"]

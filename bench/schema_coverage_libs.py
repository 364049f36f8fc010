"""The three ways ``bench/schema_coverage.py`` serves a MaskBench schema, run in its worker
process: structserve's grammar check, llguidance alone, xgrammar alone, each compiled for a real
tokenizer and its instances walked token by token through the real matcher.

``service_decision`` is the one place that says what the service does with a schema; it calls the
public APIs of ``grammars.json_schema`` (the policy) and ``grammars.compile`` (the llguidance
route and the xgrammar compile), in the order ``service/grammar_check.py`` runs them.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schema_coverage_tally import VALIDATED

from grammars.compile import LarkRouter, capture_warnings, compile_text, load_compiler, schema_verdict
from tools.grammar_check import grammar_text, walk_tokens

LIBRARIES = ("structserve", "structserve-strict", "llguidance", "xgrammar")
"""``structserve``: the default ``grammar.json_schema_semantics: exact`` (JSON Schema's own meaning,
llguidance's compiler first); ``structserve-strict``: ``strict`` (xgrammar's strict mode)."""
SEPARATORS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance alone, with the separators the service's grammars emit."""
CONST_SEPARATORS = ((",", ":"), (", ", ": "))
"""How a ``const``/``enum`` value may be written: xgrammar compact, llguidance spaced. An
instance counts as refused only when both writings are refused, as accepted when either is."""


@dataclass
class Served:
    """A compiled grammar ready to walk: ``route`` says whose matcher, ``schema`` orders members."""

    route: str
    grammar: Any
    schema: Any


class Refused(Exception):
    """The library (or the grammar check) does not serve the schema; the message says why."""


class Libraries:
    """Tokenizer, xgrammar compiler, llguidance tokenizer and the service's Lark router, built
    once per worker."""

    def __init__(self, model: Path) -> None:
        from llguidance.hf import from_tokenizer

        self.tokenizer, self.compiler = load_compiler(model)
        config = json.loads((model / "config.json").read_text())
        self.ll = from_tokenizer(self.tokenizer, config.get("vocab_size"), eos_token=config.get("eos_token_id"))
        self.router = LarkRouter(model / "tokenizer.json")

    def build(self, library: str, schema: Any) -> Served:
        """Compile ``schema`` as ``library`` would serve it; raises ``Refused``."""
        if library.startswith("structserve"):
            return self.service_decision(schema, exact=library != "structserve-strict")
        if library == "llguidance":
            return Served("llguidance", self._ll_json(schema), schema)
        return Served("xgrammar", self._xgrammar(json.dumps(schema), strict=False), schema)

    def service_decision(self, schema: Any, exact: bool = False) -> Served:
        """The service's grammar check (``grammars.compile.schema_verdict``: the policy, then llguidance
        when it takes the canonical schema exactly, else xgrammar), with xgrammar compiled here
        as the grammar check's worker compiles it: a warning (a dropped constraint) or a grammar with no
        first token is a refusal."""
        try:
            verdict = schema_verdict(schema, router=self.router, resample=True, exact=exact)
        except Exception:  # noqa: BLE001 - llguidance failing to check: xgrammar serves it, as in the grammar check
            verdict = schema_verdict(schema)
        if not verdict.served or verdict.checked is None:
            raise Refused(_refusal(verdict.reason or "", verdict.code))
        canonical = json.loads(verdict.checked.canonical)
        if verdict.validated:  # the looser grammar's instances count apart: validation catches them
            served = self._served(verdict, canonical)
            return Served(f"{served.route}{VALIDATED}", served.grammar, served.schema)
        return self._served(verdict, canonical)

    def _served(self, verdict: Any, canonical: Any) -> Served:
        assert verdict.checked is not None
        if verdict.lark is not None:
            try:
                return Served("llguidance", self._ll_lark(verdict.lark), canonical)
            except Refused:
                if verdict.checked.unenforced:  # no xgrammar form: the request fails, as in the scheduler
                    raise
                # the scheduler's fallback: xgrammar serves the same constraint
        return Served("xgrammar", self._xgrammar(verdict.checked.canonical, strict=True), canonical)

    def _xgrammar(self, text: str, *, strict: bool) -> Any:
        try:
            compiled, warnings = capture_warnings(lambda: compile_text(self.compiler, "json_schema", text))
        except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError & co.
            raise Refused(f"xgrammar: {str(exc).strip()[:300]}") from None
        if strict and warnings:
            raise Refused(f"UnsupportedKeywordError: xgrammar drops {warnings[0][:200]}")
        if strict and not _first_token(compiled):
            raise Refused("UnsatisfiableSchemaError: the compiled grammar allows no first token")
        return compiled

    def _ll_json(self, schema: Any) -> Any:
        from llguidance import LLMatcher

        try:
            grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=SEPARATORS)
        except Exception as exc:  # noqa: BLE001 - llguidance refusing the schema is a result
            raise Refused(f"llguidance: {str(exc)[:300]}") from None
        return self._ll_checked(grammar)

    def _ll_lark(self, lark: str) -> Any:
        from llguidance import LLMatcher

        return self._ll_checked(LLMatcher.grammar_from_lark(lark))

    def _ll_checked(self, grammar: str) -> Any:
        from llguidance import LLMatcher

        is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, self.ll)
        if is_error:
            raise Refused(f"llguidance: {'; '.join(messages)[:300]}")
        matcher = LLMatcher(self.ll, grammar, log_level=0)  # builds the lexer: part of the compile
        if matcher.is_error():
            raise Refused(f"llguidance: {matcher.get_error()[:300]}")
        return grammar

    def accepts(self, served: Served, instance: Any) -> bool:
        """Whether the served grammar's matcher takes ``instance`` written as that grammar emits
        JSON (either ``const`` writing), token by token, then a stop token."""
        return self.accepted_text(served, instance) is not None

    def accepted_text(self, served: Served, instance: Any) -> str | None:
        """The writing of ``instance`` the served grammar's matcher takes, or None."""
        for seps in CONST_SEPARATORS:
            text = grammar_text(instance, served.schema, const_separators=seps)
            if served.route.startswith("xgrammar"):
                if walk_tokens(served.grammar, self.tokenizer, text).accepted:
                    return text
            elif self._ll_accepts(served.grammar, text):
                return text
        return None

    def accepts_invalid(self, served: Served, schema: Any, instance: Any) -> bool:
        """Whether the grammar takes a writing of the invalid ``instance`` that is itself invalid.
        The writing can be another instance: an integral float under ``integer`` is written as the
        grammar writes it (``12345.0`` as ``12345``), which a draft-04 schema (MaskBench labels by the
        declared draft) counts as an integer: that text is valid, so no invalid output was taken."""
        text = self.accepted_text(served, instance)
        return text is not None and not _valid(schema, json.loads(text))

    def _ll_accepts(self, grammar: str, text: str) -> bool:
        from llguidance import LLMatcher
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        matcher = LLMatcher(self.ll, grammar, log_level=0)
        mask = allocate_token_bitmask(1, self.ll.vocab_size)
        for token in [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]:
            fill_next_token_bitmask(matcher, mask, 0)
            if not (int(mask[0, token // 32]) >> (token % 32)) & 1 or not matcher.consume_token(token):
                return False
        return matcher.is_stopped() and not matcher.is_error()


_NAMED = re.compile(r"`([^`]+)` at ([^:]*):")


def _refusal(reason: str, code: str | None) -> str:
    """The grammar check's 400; for unsupported keywords the list the tally groups by
    (``schema_coverage_tally.reason_keys``): ``unsupported keywords: minProperties, uniqueItems``."""
    names = _NAMED.findall(reason) if code == "unsupported_schema_keyword" else []
    if not names:
        return f"{code}: {reason}"
    return "unsupported keywords: " + ", ".join(dict.fromkeys(name for name, _ in names))


def _valid(schema: Any, instance: Any) -> bool:
    """``instance`` against ``schema`` by the validator of the draft it declares (as MaskBench labels)."""
    from jsonschema.validators import validator_for

    return validator_for(schema)(schema).is_valid(instance)


def _first_token(compiled: Any) -> bool:
    import xgrammar

    matcher = xgrammar.GrammarMatcher(compiled)
    mask = xgrammar.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    matcher.fill_next_token_bitmask(mask)
    return bool((mask != 0).any())


def worker_main(conn: Any, model: str) -> None:
    """Worker loop. Request ``(library, schema, valid, invalid)``; replies, in order,
    ``("compiled", route, reason, ms)`` then, when served, ``("walked", valid_refused,
    invalid_accepted, examples)``. ``None`` stops it."""
    libs = Libraries(Path(model))
    conn.send(("ready",))
    while (request := conn.recv()) is not None:
        library, schema, valid, invalid = request
        began = time.process_time()  # CPU time: a busy machine does not inflate it
        try:
            served = libs.build(library, schema)
        except Refused as exc:
            conn.send(("compiled", "", str(exc), (time.process_time() - began) * 1e3))
            continue
        conn.send(("compiled", served.route, "", (time.process_time() - began) * 1e3))
        refused = [v for v in valid if not libs.accepts(served, v)]
        accepted = [v for v in invalid if libs.accepts_invalid(served, schema, v)]
        examples = [f"accepted invalid {json.dumps(v)[:120]}" for v in accepted[:2]]
        examples += [f"refused valid {json.dumps(v)[:120]}" for v in refused[:2]]
        conn.send(("walked", len(refused), len(accepted), examples))

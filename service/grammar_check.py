"""The grammar check (``GrammarChecker`` of ``service/types/ports.py``, run by the pipeline after
the plan stage): ahead-of-engine grammar compilation, bounded time, cached, off the event loop.

SGLang compiles a request's grammar inside its scheduler with no time bound; an
invalid or pathological schema there has crashed engines elsewhere. The service
therefore compiles every constraint first with the same xgrammar settings, in a
worker process it can kill (grammars/compile/compiler.py); only constraints that compile
reach the engine, and SGLang's own grammar cache then makes its compile cheap.

With ``grammar.backend: llguidance`` a tool-call grammar or JSON schema that llguidance takes
exactly (``grammars/compile/llguidance_route.py``) skips that compile: it is translated and validated
here (no tokenizer, tens of ms) and built once, lazily, in the scheduler. llguidance works
under its own per-step limits (``LLParserLimits``), and a limit hit mid-generation ends that
request (``runtime_ext/grammar_route.py``), so no unbounded compile runs in the scheduler.
The Lark grammar carries the constraint's xgrammar form (``with_fallback``): if llguidance
cannot build or compile it in the scheduler, xgrammar serves it there. If llguidance fails here,
while checking the grammar, the constraint takes the xgrammar path below. Both are counted in
``structserve_grammar_fallbacks_total``.

A ``response_format`` schema with keywords xgrammar cannot enforce (``DecodeConstraint.unenforced``),
and with ``grammar.json_schema_semantics: exact`` every ``response_format`` schema, goes first,
whole, to llguidance's own JSON Schema compiler: JSON Schema's semantics (undeclared properties
are allowed unless the schema closes the object, a ``pattern`` matches anywhere; declared
properties still come in their declared order), where the routes above write out xgrammar's
strict mode, which refuses more valid instances. It carries the schema's xgrammar form as above
(strict mode: narrower, never looser), except a schema with keywords xgrammar cannot enforce:
xgrammar would loosen it, so if llguidance fails in the scheduler that request fails. If
llguidance refuses the schema, one with keywords xgrammar cannot enforce is served through its
``fallback`` (the grammar without those keywords, outputs validated and resampled:
``grammar.unenforceable``) or refused with the 400; any other takes the routes above.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace
from pathlib import Path

from grammars.compile import CompileStats, LarkRouter, VocabFacts
from grammars.errors import CompilerBusyError, GrammarError, UnsupportedKeywordError
from runtime_ext.grammar_route import with_fallback
from service.errors import CompilerBusyServiceError
from service.metrics import GRAMMAR_CACHE, GRAMMAR_COMPILE_SECONDS, GRAMMAR_FALLBACKS, SCHEMA_IGNORED_KEYWORDS
from service.types.plan import DecodeConstraint

log = logging.getLogger(__name__)


class GrammarService:
    def __init__(
        self,
        tokenizer_dir: Path,
        vocab: VocabFacts,
        *,
        timeout_s: float,
        cache_size: int,
        backend: str = "xgrammar",
        exact: bool = False,
    ):
        from grammars.compile import GrammarCompiler

        self._compiler = GrammarCompiler(tokenizer_dir, vocab, timeout_s=timeout_s, cache_size=cache_size)
        llguidance = backend == "llguidance"
        self._router = LarkRouter(tokenizer_dir / "tokenizer.json", cache_size) if llguidance else None
        self._exact = exact  # grammar.json_schema_semantics: exact
        self._compile = {
            "json_schema": self._compiler.compile_json_schema,
            "structural_tag": self._compiler.compile_structural_tag,
            "ebnf": self._compiler.compile_ebnf,
            "regex": self._compiler.compile_regex,
        }

    async def ensure_compiles(self, constraint: DecodeConstraint) -> DecodeConstraint:
        """The constraint to send to the engine: a tool-call structural tag or JSON schema that
        llguidance takes exactly becomes its Lark grammar (``grammar.backend: llguidance``;
        SGLang compiles it once, lazily); anything else is compiled here first (xgrammar).
        Raises grammars.errors.GrammarError subclasses (mapped to 400 by the API), or
        ``CompilerBusyServiceError`` (503) when the machine is too busy to compile in time."""
        count_ignored(constraint.ignored)
        return await self._served(constraint)

    async def _served(self, constraint: DecodeConstraint) -> DecodeConstraint:
        why = ""  # grammar.backend: xgrammar: llguidance is not asked
        exact = self._exact or bool(constraint.unenforced)
        if constraint.kind == "json_schema" and self._router is not None and exact:
            lark, why = await _native(self._router, constraint.value)
            if lark is not None:  # JSON Schema's own semantics (module doc)
                GRAMMAR_CACHE.labels(kind="llguidance_json", result="routed").inc()
                value = lark if constraint.unenforced else with_fallback(lark, constraint.kind, constraint.value)
                return replace(constraint, kind="ebnf", value=value)
        if constraint.unenforced:
            return await self._unenforced(constraint, why)
        lark = await self._routed(constraint)
        if lark is not None:
            GRAMMAR_CACHE.labels(kind="llguidance_lark", result="routed").inc()
            return replace(constraint, kind="ebnf", value=with_fallback(lark, constraint.kind, constraint.value))
        try:
            stats = await self._compiled(constraint)
        except CompilerBusyError as exc:
            raise CompilerBusyServiceError(exc.message, param=constraint.param) from None
        GRAMMAR_CACHE.labels(kind=constraint.kind, result="hit" if stats.cache_hit else "miss").inc()
        if not stats.cache_hit:
            GRAMMAR_COMPILE_SECONDS.labels(kind=constraint.kind).observe(stats.seconds)
        return constraint

    async def _unenforced(self, constraint: DecodeConstraint, why: str) -> DecodeConstraint:
        """A schema only llguidance's own compiler may enforce, and it refused (``why``): the
        grammar without those keywords, outputs validated and resampled, or the policy's 400."""
        if constraint.fallback is not None:  # validated and resampled (grammar.unenforceable)
            return await self._served(constraint.fallback)
        raise UnsupportedKeywordError(
            constraint.unenforced, param=constraint.param, llguidance=why, hint=constraint.hint
        )

    async def _routed(self, constraint: DecodeConstraint) -> str | None:
        """The Lark grammar to send instead of ``constraint``, or None (xgrammar serves it)."""
        if self._router is None:
            return None
        try:
            return await asyncio.to_thread(self._router.route, constraint.kind, constraint.value)
        except Exception as exc:  # noqa: BLE001 - llguidance itself failed, not the grammar: xgrammar serves it
            log.warning("llguidance failed checking a %s (%s: %s); xgrammar serves it", constraint.kind,
                        type(exc).__name__, str(exc)[:300])  # fmt: skip
            GRAMMAR_FALLBACKS.service["check"] += 1
            return None

    async def _compiled(self, constraint: DecodeConstraint) -> CompileStats:
        try:
            return await asyncio.to_thread(self._compile[constraint.kind], constraint.value)
        except GrammarError as exc:
            await self._blame_part(constraint)
            raise exc.with_param(constraint.param) from None

    async def _blame_part(self, constraint: DecodeConstraint) -> None:
        """A combined grammar failed: re-raise the first of its schemas that fails alone,
        naming its request field (e.g. ``tools.3.function.parameters``)."""
        for param, schema in constraint.parts:
            try:
                await asyncio.to_thread(self._compiler.compile_json_schema, schema)
            except GrammarError as exc:
                raise exc.with_param(param) from None

    def close(self) -> None:
        self._compiler.close()


_LABEL = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]{0,39}")
_MAX_LABELS = 64
_labels: set[str] = set()


def count_ignored(ignored: tuple[str, ...]) -> None:
    """Count each ignored keyword occurrence (``[tool: ]keyword at /pointer``) by name; the
    names are the client's, so past ``_MAX_LABELS`` distinct ones (or for a name that is not
    a plain identifier) the label is ``other``."""
    for entry in ignored:
        name = entry.rsplit(" at ", 1)[0].rsplit(": ", 1)[-1]
        if _LABEL.fullmatch(name) and (name in _labels or len(_labels) < _MAX_LABELS):
            _labels.add(name)
        else:
            name = "other"
        SCHEMA_IGNORED_KEYWORDS.labels(keyword=name).inc()


async def _native(router: LarkRouter, schema: str) -> tuple[str | None, str]:
    """llguidance's own JSON Schema compiler on ``schema``: (its grammar, "") or (None, why it
    refused)."""
    try:
        return await asyncio.to_thread(router.route_native, schema)
    except Exception as exc:  # noqa: BLE001 - llguidance itself failed: the other routes decide
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"

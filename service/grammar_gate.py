"""The grammar gate (``GrammarChecker`` of ``service/types.py``, run by the pipeline after
the plan stage): ahead-of-engine grammar compilation, bounded time, cached, off the event loop.

SGLang compiles a request's grammar inside its scheduler with no time bound; an
invalid or pathological schema there has crashed engines elsewhere. The service
therefore compiles every constraint first with the same xgrammar settings, in a
worker process it can kill (grammars/compile.py); only constraints that compile
reach the engine, and SGLang's own grammar cache then makes its compile cheap.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from grammars.compile import CompileStats
from grammars.errors import CompilerBusyError, GrammarError
from grammars.xgrammar_calls import VocabFacts
from service.errors import CompilerBusyServiceError
from service.metrics import GRAMMAR_CACHE, GRAMMAR_COMPILE_SECONDS
from service.types import DecodeConstraint


class GrammarService:
    def __init__(self, tokenizer_dir: Path, vocab: VocabFacts, *, timeout_s: float, cache_size: int):
        from grammars.compile import GrammarCompiler

        self._compiler = GrammarCompiler(tokenizer_dir, vocab, timeout_s=timeout_s, cache_size=cache_size)
        self._compile = {
            "json_schema": self._compiler.compile_json_schema,
            "structural_tag": self._compiler.compile_structural_tag,
            "ebnf": self._compiler.compile_ebnf,
            "regex": self._compiler.compile_regex,
        }

    async def ensure_compiles(self, constraint: DecodeConstraint) -> None:
        """Raises grammars.errors.GrammarError subclasses (mapped to 400 by the API), or
        ``CompilerBusyServiceError`` (503) when the machine is too busy to compile in time."""
        try:
            stats = await self._compiled(constraint)
        except CompilerBusyError as exc:
            raise CompilerBusyServiceError(exc.message, param=constraint.param) from None
        GRAMMAR_CACHE.labels(kind=constraint.kind, result="hit" if stats.cache_hit else "miss").inc()
        if not stats.cache_hit:
            GRAMMAR_COMPILE_SECONDS.labels(kind=constraint.kind).observe(stats.seconds)

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

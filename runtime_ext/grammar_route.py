"""Grammars in llguidance's Lark go to llguidance; everything else stays with xgrammar.

SGLang 0.5.23 runs one grammar backend per scheduler (``--grammar-backend``); the service
starts it with xgrammar. xgrammar builds a token mask for every counted position of a
bounded string when it compiles, so a 64-tool call grammar takes seconds; llguidance
builds masks as the parser reaches them (docs/benchmarks.md).
The service therefore sends tool-call grammars as llguidance Lark
(``grammars.compile.llguidance_lark``), under SGLang's ``ebnf`` key.

AROUND hooks on SGLang's own ``XGrammarGrammarBackend``:
- ``__init__``: also starts building an llguidance backend for the same tokenizer, vocab size
  and EOS ids (SGLang's ``GuidanceBackend``, exactly as ``--grammar-backend llguidance``
  builds it), on the backend's compile thread pool, so neither startup nor the first
  grammar waits for it unless that grammar needs it;
- ``dispatch_ebnf``: a text that starts with ``%llguidance {}`` (``LARK_HEADER``) becomes a
  ``GuidanceGrammar`` (``grammar_from("lark", …)``); any other text is xgrammar EBNF, as before.

**Fallback.** The service sends each Lark grammar with the xgrammar form of the same constraint
on its second line (``with_fallback``: the JSON schema or structural tag it would otherwise have
sent). When llguidance cannot serve it — its backend could not be built for this tokenizer
(reason ``build``, logged once when the build fails) or this grammar does not compile in it
(``compile``) — that form goes to SGLang's own xgrammar dispatch instead: the request is served,
the fallback logged and counted (``GrammarStats.fallbacks``, ``structserve_grammar_fallbacks_total``
on /metrics). When xgrammar refuses it as well SGLang aborts the request with xgrammar's message
(the service answers 400 naming the field); when no xgrammar form came with the grammar or
xgrammar raised, with a message starting ``ENGINE_FAULT`` (the service answers 500
``grammar_engine_error``). The xgrammar form is compiled here, in the scheduler, under SGLang's
grammar wait bound, not ahead of the engine as the service compiles xgrammar constraints.

Both libraries fill SGLang's packed int32 bitmask (-1 = every token allowed, one bit per token,
``ceil(vocab/32)`` words per row), and SGLang fills each row through its own grammar object
(``BaseGrammarObject.fill_vocab_mask_batched``), so a batch may mix them. SGLang's cache, its
reasoning wrapper (``ReasonerGrammarBackend``) and its abort on an invalid grammar stay as they
are: only the object built for the key changes. Every grammar the backend builds is counted per
library (``GrammarStats``, ``plugin_report()["grammar"]``; SGLang's cache hits never reach it).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any

from runtime_ext.state import GrammarStats

logger = logging.getLogger(__name__)
TARGET = "sglang.srt.constrained.xgrammar_backend.XGrammarGrammarBackend"
LARK_HEADER = "%llguidance {}\n"
"""First line of every grammar ``grammars.compile.llguidance_lark`` builds: llguidance's own marker, and
how ``dispatch_ebnf`` tells an llguidance grammar from xgrammar EBNF."""
_GUIDANCE = "_structserve_guidance"
FALLBACK_LINE = "// xgrammar fallback: "
"""Starts the second line of a routed grammar: a Lark comment holding the xgrammar form."""
ENGINE_FAULT = "grammar engine fault"
"""Starts the abort message of a grammar neither library could serve for a server-side reason."""
_XGRAMMAR_KINDS = ("json_schema", "structural_tag")


def with_fallback(lark: str, kind: str, value: str) -> str:
    """``lark`` (it starts with ``LARK_HEADER``) carrying ``value``, the ``json_schema`` or
    ``structural_tag`` text xgrammar would compile for the same constraint, on its second line.
    ``value`` is JSON text: a line break in it can only be whitespace, so it becomes a space."""
    if kind not in _XGRAMMAR_KINDS or not lark.startswith(LARK_HEADER):
        raise ValueError(f"no xgrammar fallback for {kind!r}")
    flat = value.replace("\r", " ").replace("\n", " ")
    return f"{LARK_HEADER}{FALLBACK_LINE}{kind} {flat}\n{lark[len(LARK_HEADER) :]}"


def split_fallback(text: str) -> tuple[str, tuple[str, str] | None]:
    """``text`` without its fallback line, and the fallback's ``(kind, value)`` (None: none)."""
    first, _, rest = text[len(LARK_HEADER) :].partition("\n")
    if not text.startswith(LARK_HEADER + FALLBACK_LINE):
        return text, None
    kind, _, value = first.removeprefix(FALLBACK_LINE).partition(" ")
    return LARK_HEADER + rest, (kind, value)


def _build_guidance(tokenizer: Any, vocab_size: int, eos: Any) -> Any:
    from sglang.srt.constrained.llguidance_backend import GuidanceBackend, GuidanceGrammar

    class ContainedGuidanceGrammar(GuidanceGrammar):
        """SGLang's GuidanceGrammar raises ValueError in the scheduler loop when its matcher
        errs (a limit of llguidance's lexer or parser hit mid-generation), which would take
        the scheduler down. Here the request ends instead: after an error only EOS is allowed,
        and the service's output validation reports the truncated answer."""

        failed = False

        def _check_err(self) -> None:
            if self.ll_matcher.is_error() and not self.failed:
                self.failed = True
                logger.warning("llguidance grammar failed mid-generation, ending the request: %s",
                               self.ll_matcher.get_error()[:300])  # fmt: skip

        def accept_token(self, token: int) -> None:
            if self.failed:
                self.finished = token in self.eos_tokens
                return
            super().accept_token(token)

        def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
            super().fill_vocab_mask(vocab_mask, idx)
            if self.failed:
                only_eos(vocab_mask, idx, self.eos_tokens)

        @staticmethod
        def fill_vocab_mask_batched(entries: Any, vocab_mask: Any) -> None:
            GuidanceGrammar.fill_vocab_mask_batched(entries, vocab_mask)
            for entry in entries:
                if getattr(entry.grammar, "failed", False):
                    only_eos(vocab_mask, entry.row, entry.grammar.eos_tokens)

        def copy(self) -> Any:
            return ContainedGuidanceGrammar(
                self.llguidance_tokenizer, self.serialized_grammar, ll_matcher=self.ll_matcher.deep_copy()
            )

    backend = GuidanceBackend(tokenizer=tokenizer, n_vocab=vocab_size, eos_token_ids=eos)
    backend.grammar_class = ContainedGuidanceGrammar
    return backend


def only_eos(vocab_mask: Any, row: int, eos_tokens: Any) -> None:
    """Row ``row`` of a packed int32 bitmask allows exactly ``eos_tokens``."""
    vocab_mask[row].zero_()
    for token in eos_tokens:
        bit = 1 << (token % 32)
        vocab_mask[row, token // 32] |= bit - (1 << 32) if bit >= 1 << 31 else bit


def _guidance_grammar(backend: Any, lark: str) -> tuple[Any, str | None]:
    """SGLang's ``GuidanceBackend._from_serialized`` with the contained grammar class: the
    grammar and None, or None and why llguidance cannot serve it (``build: …``, ``compile: …``)."""
    from llguidance import grammar_from

    try:
        guidance = getattr(backend, _GUIDANCE).result()
    except Exception as exc:  # noqa: BLE001 - logged when the build failed (_log_build)
        return None, f"build: {type(exc).__name__}: {exc}"
    try:
        grammar = guidance.grammar_class(
            llguidance_tokenizer=guidance.llguidance_tokenizer, serialized_grammar=grammar_from("lark", lark)
        )
    except Exception as exc:  # noqa: BLE001 - any llguidance failure: xgrammar serves the constraint
        return None, f"compile: {type(exc).__name__}: {exc}"
    if grammar.failed:
        return None, f"compile: {grammar.ll_matcher.get_error()}"
    return grammar, None


def _log_build(future: Future) -> None:
    if (exc := future.exception()) is not None:
        logger.error(
            "llguidance could not be built for this tokenizer (%s: %s); grammars routed to llguidance "
            'are served by xgrammar (structserve_grammar_fallbacks_total{reason="build"})',
            type(exc).__name__,
            str(exc)[:300],
        )


def _init(
    original: Any, backend: Any, tokenizer: Any, vocab_size: int, model_eos_token_ids: Any = None, **kw: Any
) -> None:
    original(backend, tokenizer, vocab_size, model_eos_token_ids, **kw)
    eos = model_eos_token_ids
    future: Future = backend.executor.submit(_build_guidance, tokenizer, vocab_size, eos)
    future.add_done_callback(_log_build)
    setattr(backend, _GUIDANCE, future)


def _dispatcher(stats: GrammarStats) -> Any:
    def dispatch_ebnf(original: Any, backend: Any, key_string: str) -> Any:
        started = time.perf_counter()
        if not key_string.startswith(LARK_HEADER) or not hasattr(backend, _GUIDANCE):
            result = original(backend, key_string)
            stats.observe("xgrammar", time.perf_counter() - started)
            return result
        lark, fallback = split_fallback(key_string)
        grammar, failure = _guidance_grammar(backend, lark)
        if failure is None:
            stats.observe("llguidance", time.perf_counter() - started)
            return grammar
        return _fall_back(backend, fallback, failure, stats)

    return dispatch_ebnf


def _fall_back(backend: Any, fallback: tuple[str, str] | None, failure: str, stats: GrammarStats) -> Any:
    """The xgrammar grammar for the routed constraint llguidance could not serve (``failure``)."""
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    reason = failure.partition(":")[0]
    if fallback is None or fallback[0] not in _XGRAMMAR_KINDS:
        logger.error("llguidance cannot serve a grammar that carries no xgrammar form (%s)", failure[:300])
        return InvalidGrammarObject(f"{ENGINE_FAULT}: llguidance {reason} failed and no xgrammar form was sent")
    kind, value = fallback
    logger.warning("llguidance %s failed (%s); serving this %s with xgrammar", reason, failure[:300], kind)
    stats.fallback(reason)
    try:  # SGLang's own (hooked, counted) dispatch, as for a constraint the service sends to xgrammar
        return backend.dispatch_json(value) if kind == "json_schema" else backend.dispatch_structural_tag(value)
    except Exception as exc:  # noqa: BLE001 - SGLang's dispatch returns its errors; this is a fault
        logger.exception("xgrammar raised on the fallback of an llguidance grammar")
        return InvalidGrammarObject(f"{ENGINE_FAULT}: xgrammar raised {type(exc).__name__}")


def _counted(stats: GrammarStats) -> Any:
    def dispatch(original: Any, backend: Any, key_string: str) -> Any:
        started = time.perf_counter()
        result = original(backend, key_string)
        stats.observe("xgrammar", time.perf_counter() - started)
        return result

    return dispatch


def register(hooks: Any, hook_type: Any, stats: GrammarStats) -> None:
    hooks.register(f"{TARGET}.__init__", _init, hook_type.AROUND)
    hooks.register(f"{TARGET}.dispatch_ebnf", _dispatcher(stats), hook_type.AROUND)
    for kind in ("json", "regex", "structural_tag"):  # counted only
        hooks.register(f"{TARGET}.dispatch_{kind}", _counted(stats), hook_type.AROUND)

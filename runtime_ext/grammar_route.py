"""Grammars in llguidance's Lark go to llguidance; everything else stays with xgrammar.

SGLang 0.5.23 runs one grammar backend per scheduler (``--grammar-backend``); the service
starts it with xgrammar. xgrammar builds a token mask for every counted position of a
bounded string when it compiles, so a 64-tool call grammar takes seconds; llguidance
builds masks as the parser reaches them (docs/benchmarks.md, issue 19 parts 3 and 4).
The service therefore sends tool-call grammars as llguidance Lark
(``grammars.llguidance_lark``), under SGLang's ``ebnf`` key.

AROUND hooks on SGLang's own ``XGrammarGrammarBackend``:
- ``__init__``: also starts building an llguidance backend for the same tokenizer, vocab size
  and EOS ids (SGLang's ``GuidanceBackend``, exactly as ``--grammar-backend llguidance``
  builds it), on the backend's compile thread pool, so neither startup nor the first
  grammar waits for it unless that grammar needs it;
- ``dispatch_ebnf``: a text that starts with ``%llguidance {}`` (``LARK_HEADER``) becomes a
  ``GuidanceGrammar`` (``grammar_from("lark", …)``); any other text is xgrammar EBNF, as before.

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
"""First line of every grammar ``grammars.llguidance_lark`` builds: llguidance's own marker, and
how ``dispatch_ebnf`` tells an llguidance grammar from xgrammar EBNF."""
_GUIDANCE = "_structserve_guidance"


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


def _guidance_grammar(guidance: Any, serialized: str) -> Any:
    """SGLang's ``GuidanceBackend._from_serialized`` with the contained grammar class."""
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    try:
        grammar = guidance.grammar_class(
            llguidance_tokenizer=guidance.llguidance_tokenizer, serialized_grammar=serialized
        )
    except Exception as exc:  # noqa: BLE001 - SGLang aborts the request with this message
        return InvalidGrammarObject(str(exc))
    return InvalidGrammarObject(grammar.ll_matcher.get_error()) if grammar.failed else grammar


def _init(
    original: Any, backend: Any, tokenizer: Any, vocab_size: int, model_eos_token_ids: Any = None, **kw: Any
) -> None:
    original(backend, tokenizer, vocab_size, model_eos_token_ids, **kw)
    eos = model_eos_token_ids
    future: Future = backend.executor.submit(_build_guidance, tokenizer, vocab_size, eos)
    setattr(backend, _GUIDANCE, future)


def _dispatcher(stats: GrammarStats) -> Any:
    def dispatch_ebnf(original: Any, backend: Any, key_string: str) -> Any:
        started = time.perf_counter()
        if not key_string.startswith(LARK_HEADER) or not hasattr(backend, _GUIDANCE):
            result = original(backend, key_string)
            stats.observe("xgrammar", time.perf_counter() - started)
            return result
        from llguidance import grammar_from
        from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

        try:
            guidance = getattr(backend, _GUIDANCE).result()
            serialized = grammar_from("lark", key_string)
        except Exception as exc:  # noqa: BLE001 - SGLang aborts the request with this message
            return InvalidGrammarObject(f"llguidance: {exc}")
        result = _guidance_grammar(guidance, serialized)
        stats.observe("llguidance", time.perf_counter() - started)
        return result

    return dispatch_ebnf


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

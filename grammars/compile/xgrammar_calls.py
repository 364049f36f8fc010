"""The xgrammar calls SGLang 0.5.23's xgrammar backend makes, outside any worker.

``load_compiler`` builds the tokenizer info and compiler like SGLang does; ``compile_text``
dispatches a grammar kind the way SGLang does; ``accepts_a_first_token`` checks that a fresh
matcher allows something; ``capture_warnings`` collects the constraints xgrammar drops (its
C++ logger writes them to fd 2). Used by the service's compile worker
(``grammars.compile.compiler``) and the offline grammar check. Imports xgrammar only when called.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["Kind", "VocabFacts", "accepts_a_first_token", "capture_warnings", "compile_text", "load_compiler"]

Kind = Literal["json_schema", "structural_tag", "ebnf", "regex"]


@dataclass(frozen=True)
class VocabFacts:
    """What xgrammar's tokenizer info takes from the model's ``config.json``, as SGLang passes
    it: the model's vocab size (may exceed the tokenizer's) and its EOS ids (None = absent)."""

    vocab_size: int | None = None
    stop_ids: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> VocabFacts:
        eos = config.get("eos_token_id")
        stop = (eos,) if isinstance(eos, int) else tuple(eos) if isinstance(eos, list) else None
        size = config.get("vocab_size")
        return cls(size if isinstance(size, int) else None, stop)


def load_compiler(tokenizer_dir: Path, vocab: VocabFacts | None = None) -> tuple[Any, Any]:
    """``(hf_tokenizer, xgrammar.GrammarCompiler)`` for ``tokenizer_dir`` (a HF model or
    tokenizer dir), built like SGLang: ``TokenizerInfo.from_huggingface`` with the
    model's vocab size and EOS ids (``vocab``: the serving path passes what it read once;
    offline callers leave it None and it is read from ``config.json``). Imports xgrammar."""
    import xgrammar
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    facts = vocab if vocab is not None else VocabFacts.from_config(_read_json(tokenizer_dir / "config.json"))
    info = xgrammar.TokenizerInfo.from_huggingface(
        tokenizer,
        vocab_size=facts.vocab_size,
        stop_token_ids=list(facts.stop_ids) if facts.stop_ids is not None else None,
    )
    from grammars.compile.worker_clock import COMPILE_THREADS

    return tokenizer, xgrammar.GrammarCompiler(info, max_threads=COMPILE_THREADS, cache_enabled=False)


def compile_text(compiler: Any, kind: Kind, text: str, *, any_whitespace: bool = False) -> Any:
    """Compile ``text`` with xgrammar's ``compiler`` the way SGLang 0.5.23 dispatches
    ``kind``; returns the ``CompiledGrammar``. Raises xgrammar's exceptions."""
    if kind == "json_schema":
        return compiler.compile_json_schema(text, any_whitespace=any_whitespace)
    if kind == "ebnf":
        return compiler.compile_grammar(text)
    if kind == "regex":
        return compiler.compile_regex(text)
    if kind != "structural_tag":
        raise ValueError(f"unknown grammar kind {kind!r}")
    tag = json.loads(text)
    if isinstance(tag, dict) and tag.get("structures") is not None:  # SGLang's legacy format
        import xgrammar

        items = [
            xgrammar.StructuralTagItem(
                begin=s["begin"], end=s["end"], schema=json.dumps({} if s.get("schema") is None else s["schema"])
            )
            for s in tag["structures"]
        ]
        legacy = xgrammar.StructuralTag.from_legacy_structural_tag(items, tag["triggers"])
        legacy.format.at_least_one = tag.get("at_least_one", False)
        return compiler.compile_structural_tag(legacy)
    return compiler.compile_structural_tag(text)


def accepts_a_first_token(compiled: Any) -> bool:
    """Whether a fresh matcher of xgrammar's ``compiled`` grammar allows any token (an
    empty mask means the engine samples from nothing and aborts the request)."""
    import xgrammar

    matcher = xgrammar.GrammarMatcher(compiled)
    mask = xgrammar.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    matcher.fill_next_token_bitmask(mask)
    return bool((mask != 0).any())


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def capture_warnings(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn`` with file descriptor 2 redirected; return its result and the
    ``Warning:`` lines xgrammar's C++ logger wrote meanwhile (each one means a
    constraint xgrammar drops). Not thread-safe (process-wide fd swap)."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        lines = sink.read().decode("utf-8", "replace").splitlines()
    return result, [line.split("Warning:", 1)[1].strip() for line in lines if "Warning:" in line]

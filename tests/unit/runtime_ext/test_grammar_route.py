"""runtime_ext.grammar_route on SGLang's own XGrammarGrammarBackend (SmolLM2's tokenizer, no engine):
a ``%llguidance`` text becomes SGLang's GuidanceGrammar, any other EBNF stays xgrammar, each build is
counted, and a batch mixing the two fills and applies one bitmask row by row as each alone."""

from __future__ import annotations

import json

import pytest
import torch

from runtime_ext import grammar_route
from runtime_ext.state import GrammarStats

LARK = grammar_route.LARK_HEADER + 'start: "yes" | "no"\n'
EBNF = 'root ::= "maybe"'
BROKEN_LARK = grammar_route.LARK_HEADER + "start: nonsense_rule\n"  # llguidance cannot compile it
BOOLEAN = '{"type": "boolean"}'


@pytest.fixture(scope="module")
def backend():
    import transformers
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    from assets import model_dir

    path = model_dir("smollm2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    built = XGrammarGrammarBackend.__new__(XGrammarGrammarBackend)
    grammar_route._init(XGrammarGrammarBackend.__init__, built, tokenizer, vocab, [tokenizer.eos_token_id])
    return built, tokenizer, vocab


@pytest.fixture(scope="module")
def unbuildable(backend):
    """A backend whose llguidance build fails for real: the model's vocab is 10 tokens short of
    its tokenizer's (llguidance: "vocab size too small"; xgrammar serves such a model)."""
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    _, tokenizer, vocab = backend
    built = XGrammarGrammarBackend.__new__(XGrammarGrammarBackend)
    grammar_route._init(XGrammarGrammarBackend.__init__, built, tokenizer, vocab - 10, [tokenizer.eos_token_id])
    with pytest.raises(ValueError, match="vocab size too small"):
        getattr(built, grammar_route._GUIDANCE).result()
    return built


def _dispatch(backend, text: str, stats: GrammarStats):
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    return grammar_route._dispatcher(stats)(XGrammarGrammarBackend.dispatch_ebnf, backend, text)


def _allowed(mask: torch.Tensor, row: int, tokenizer, words: list[str]) -> list[bool]:
    ids = [tokenizer.encode(w, add_special_tokens=False)[0] for w in words]
    return [bool((int(mask[row, t // 32]) >> (t % 32)) & 1) for t in ids]


def test_lark_goes_to_llguidance_and_ebnf_stays_with_xgrammar(backend):
    from sglang.srt.constrained.llguidance_backend import GuidanceGrammar
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar

    built, _, _ = backend
    stats = GrammarStats()
    assert isinstance(_dispatch(built, LARK, stats), GuidanceGrammar)
    assert isinstance(_dispatch(built, EBNF, stats), XGrammarGrammar)
    assert stats.compiles == {"llguidance": 1, "xgrammar": 1}
    bad = _dispatch(built, grammar_route.LARK_HEADER + "start: nonsense_rule\n", stats)
    assert type(bad).__name__ == "InvalidGrammarObject"  # SGLang aborts that request with the message


def test_a_mixed_batch_fills_each_row_as_its_own_library(backend):
    from sglang.srt.constrained.base_grammar_backend import GrammarRow

    built, tokenizer, vocab = backend
    stats = GrammarStats()
    xgr, llg = _dispatch(built, EBNF, stats), _dispatch(built, LARK, stats)
    words = ["yes", "no", "maybe"]
    mask = xgr.allocate_vocab_mask(vocab, 3, "cpu")  # the batch's first grammar allocates, as SGLang does
    type(xgr).fill_vocab_mask_batched([GrammarRow(0, xgr), GrammarRow(1, llg)], mask)
    assert _allowed(mask, 0, tokenizer, words) == [False, False, True]
    assert _allowed(mask, 1, tokenizer, words) == [True, True, False]
    assert bool((mask[2] == -1).all())  # a row without a grammar stays unconstrained
    logits = torch.zeros(3, vocab)
    xgr.apply_vocab_mask(logits, mask)  # the first grammar applies the whole mask (GrammarMask)
    ids = [tokenizer.encode(w, add_special_tokens=False)[0] for w in words]
    assert torch.isinf(logits[0, ids[:2]]).all() and logits[0, ids[2]] == 0
    assert torch.isinf(logits[1, ids[2]]) and (logits[1, ids[:2]] == 0).all()
    assert (logits[2] == 0).all()


def test_a_matcher_error_ends_the_request_instead_of_raising_in_the_scheduler(backend):
    """SGLang's GuidanceGrammar raises ValueError (in the scheduler loop) when its matcher errs;
    the routed grammar allows only EOS from then on, and EOS finishes it."""
    built, tokenizer, vocab = backend
    template = _dispatch(built, LARK, GrammarStats())
    grammar = template.copy()  # a request's copy of SGLang's cached template
    grammar.accept_token(tokenizer.encode("maybe", add_special_tokens=False)[0])  # not in the grammar
    assert grammar.failed and not grammar.finished
    mask = grammar.allocate_vocab_mask(vocab, 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    allowed = [t for t in range(vocab) if (int(mask[0, t // 32]) >> (t % 32)) & 1]
    assert allowed == sorted(grammar.eos_tokens)
    grammar.accept_token(allowed[0])
    assert grammar.finished
    assert not template.failed and type(grammar) is type(template)  # the template stays healthy


def test_the_xgrammar_form_rides_along_as_the_second_line():
    value = '{"type": "object",\n "properties": {"a": {"type": "string"}}}'
    text = grammar_route.with_fallback(LARK, "json_schema", value)
    assert text.startswith(grammar_route.LARK_HEADER + grammar_route.FALLBACK_LINE)
    lark, fallback = grammar_route.split_fallback(text)
    assert lark == LARK and fallback == ("json_schema", value.replace("\n", " "))
    assert json.loads(fallback[1]) == json.loads(value)
    assert grammar_route.split_fallback(LARK) == (LARK, None)
    with pytest.raises(ValueError):
        grammar_route.with_fallback(LARK, "regex", "a+")


def test_a_grammar_with_its_fallback_still_goes_to_llguidance(backend):
    from sglang.srt.constrained.llguidance_backend import GuidanceGrammar

    built, _, _ = backend
    stats = GrammarStats()
    assert isinstance(
        _dispatch(built, grammar_route.with_fallback(LARK, "json_schema", BOOLEAN), stats), GuidanceGrammar
    )
    assert stats.compiles == {"llguidance": 1} and stats.fallbacks == {}


def test_a_grammar_llguidance_cannot_compile_is_served_by_xgrammar(backend):
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar

    built, tokenizer, vocab = backend
    stats = GrammarStats()
    grammar = _dispatch(built, grammar_route.with_fallback(BROKEN_LARK, "json_schema", BOOLEAN), stats)
    assert isinstance(grammar, XGrammarGrammar)
    assert stats.fallbacks == {"compile": 1} and "llguidance" not in stats.compiles
    mask = grammar.allocate_vocab_mask(vocab, 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    assert _allowed(mask, 0, tokenizer, ["true", "false", "yes"]) == [True, True, False]  # the JSON schema's


def test_without_an_llguidance_backend_every_routed_grammar_is_served_by_xgrammar(unbuildable):
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar

    stats = GrammarStats()
    tag = json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "yes"}})
    assert isinstance(
        _dispatch(unbuildable, grammar_route.with_fallback(LARK, "json_schema", BOOLEAN), stats), XGrammarGrammar
    )
    assert isinstance(
        _dispatch(unbuildable, grammar_route.with_fallback(LARK, "structural_tag", tag), stats), XGrammarGrammar
    )
    assert stats.fallbacks == {"build": 2} and "llguidance" not in stats.compiles


def test_when_both_libraries_fail_the_request_is_refused(backend):
    """xgrammar refuses the fallback as well: SGLang aborts with xgrammar's message (the service
    answers 400 naming the field); no xgrammar form at all: an ``ENGINE_FAULT`` (the service's 500)."""
    built, _, _ = backend
    stats = GrammarStats()
    refused = _dispatch(built, grammar_route.with_fallback(BROKEN_LARK, "json_schema", "{not json"), stats)
    assert type(refused).__name__ == "InvalidGrammarObject" and grammar_route.ENGINE_FAULT not in refused.error_message
    bare = _dispatch(built, BROKEN_LARK, stats)
    assert type(bare).__name__ == "InvalidGrammarObject" and bare.error_message.startswith(grammar_route.ENGINE_FAULT)
    assert stats.fallbacks == {"compile": 1}

"""The pythonic tool-call grammar (real xgrammar, tiny Qwen3 tokenizer) against its parser.

Property: every output the grammar admits parses back (``runtime_ext.parsers``) into exactly
its calls, with arguments valid under the tool's schema. The outputs are sampled from the
grammar itself: random walks of a GrammarMatcher over the real vocabulary, biased towards
punctuation (so literals close) and whitespace / control characters, with every allowed
token reachable.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
import transformers  # noqa: E402
import xgrammar as xgr  # noqa: E402 -- pinned: a missing one is a failure, not a skip
from jsonschema import Draft202012Validator

from assets import default_cache_dir
from grammars.tool_calls import ToolSpec, tool_call_constraint
from runtime_ext.formats import get_format, render_calls
from runtime_ext.parsers import parse

TOKENIZER_DIR = default_cache_dir() / "models" / "qwen3-tiny"
RICH = ToolSpec(
    "book.trip",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12, "description": "where"},
            "days": {"type": "integer"},
            "budget": {"type": ["number", "null"]},
            "unit": {"enum": ["c", "f", 3, None, True]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "who": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["age"],
                "additionalProperties": False,
            },
            "extra": {"type": "object"},
            "mode": {"const": "fast"},
            "either": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {}}]},
        },
        "required": ["city", "tags"],
    },
)
NOOP = ToolSpec("noop")
TOOLS = [RICH, NOOP]
PUNCT = set("\"'()[]{},:=0123456789.-\\ne")
SPACE = {chr(c) for c in range(33)} | {"\x7f", "\x85", "\u2028", "\u00a0"}


class Sampler:
    def __init__(self) -> None:
        if not (TOKENIZER_DIR / "tokenizer.json").exists():
            pytest.fail(f"tiny Qwen3 tokenizer not fetched ({TOKENIZER_DIR}); run `make assets`")
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(TOKENIZER_DIR)
        self.vocab = json.loads((TOKENIZER_DIR / "config.json").read_text())["vocab_size"]
        info = xgr.TokenizerInfo.from_huggingface(
            self.tokenizer, vocab_size=self.vocab, stop_token_ids=[self.tokenizer.eos_token_id]
        )
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.pieces = [self.tokenizer.decode([i]) for i in range(len(self.tokenizer))]
        self.kinds = []  # token classes the walk prefers: punctuation, spaces and control characters
        for chars in (PUNCT, SPACE):
            kind = np.zeros(self.vocab, dtype=bool)
            kind[[i for i, p in enumerate(self.pieces) if p and set(p) <= chars]] = True
            self.kinds.append(kind)

    def compile(self, mode: str, **kw: Any) -> Any:
        return self.compiler.compile_structural_tag(tool_call_constraint("pythonic", TOOLS, mode, **kw).value)

    def walk(self, grammar: Any, rng: random.Random, start: str = "", steps: int = 300) -> str | None:
        """A random output the grammar admits that starts with ``start`` (None if it did not
        end within ``steps`` tokens)."""
        matcher, out = xgr.GrammarMatcher(grammar), [start]
        assert matcher.accept_string(start)
        mask = xgr.allocate_token_bitmask(1, self.vocab)
        eos = self.tokenizer.eos_token_id
        for _ in range(steps):
            matcher.fill_next_token_bitmask(mask)
            flags = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")[: self.vocab].astype(bool)
            if flags[eos] and rng.random() < 0.3:
                return "".join(out)
            flags[eos] = False
            flags[len(self.pieces) :] = False
            preferred = np.nonzero(flags & self.kinds[rng.random() < 0.3])[0]
            pool = preferred if len(preferred) and rng.random() < 0.8 else np.nonzero(flags)[0]
            if not len(pool):
                return "".join(out)
            token = int(rng.choice(list(pool)))
            assert matcher.accept_token(token)
            out.append(self.pieces[token])
        return None


@pytest.fixture(scope="module")
def sampler() -> Sampler:
    return Sampler()


def check_parses_back(text: str) -> list[tuple[str, Any]]:
    result = parse("pythonic", text, [t.name for t in TOOLS])
    assert not result.incomplete and result.content == "", text
    calls = [(c.name, json.loads(c.arguments)) for c in result.calls]
    assert calls, text
    for name, args in calls:
        tool = next(t for t in TOOLS if t.name == name)
        Draft202012Validator(tool.parameters or {"type": "object", "properties": {}}).validate(args)
    return calls


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_everything_the_grammar_admits_parses_back_to_valid_calls(sampler: Sampler, mode: str) -> None:
    grammar = sampler.compile(mode)
    rng = random.Random(1234)
    calls = [o for o in (sampler.walk(grammar, rng, "[") for _ in range(16)) if o is not None]
    assert len(calls) >= 10, f"only {len(calls)} walks ended"
    for text in calls:
        check_parses_back(text)
    if mode == "auto":  # free text: whatever the walk writes first, it stays content
        for text in filter(None, (sampler.walk(grammar, rng, steps=20) for _ in range(10))):
            assert parse("pythonic", text, [t.name for t in TOOLS]).calls == [] or text.lstrip().startswith("[")


def test_canonical_renderings_are_admitted_and_round_trip(sampler: Sampler) -> None:
    args = {
        "city": 'Zoë\'s "bar"',
        "budget": -1.5e3,
        "unit": None,
        "tags": ["a", "b\\n"],
        "who": {"name": "x", "age": 3},
        "extra": {"k": [1, {"z": False}]},
        "mode": "fast",
        "either": [None],
    }
    text = render_calls(get_format("pythonic"), [("book.trip", json.dumps(args)), ("noop", "{}")])
    matcher = xgr.GrammarMatcher(sampler.compile("required"))
    assert matcher.accept_string(text) and matcher.accept_token(sampler.tokenizer.eos_token_id)
    assert check_parses_back(text) == [("book.trip", args), ("noop", {})]


@pytest.mark.parametrize(
    "bad",
    [
        "[book.trip(tags=['a'])]",  # required city missing
        "[book.trip(city='x', tags=[])]",  # minItems
        "[book.trip(city='abcdefghijklm', tags=['a'])]",  # maxLength 12
        "[book.trip(tags=['a'], city='x')]",  # schema order
        "[book.trip(city='x', tags=['a'], unit='k')]",  # enum
        "[book.trip(city='x', tags=['a'], who={'name': 'n'})]",  # nested required
        "[book.trip(city='x', tags=['a'], days=1.5)]",  # integer
        "[book.trip(city=\"a\nb\", tags=['a'])]",  # raw newline in a literal
        "[book.trip(city='x', tags=['a'], budget=1e999)]",  # would overflow to inf
        "[noop(x=1)]",
        "[nope()]",
        "noop()",
        "[noop()] and text",
        "[]",
    ],
)
def test_outside_the_schema_is_refused(sampler: Sampler, bad: str) -> None:
    matcher = xgr.GrammarMatcher(sampler.compile("required"))
    assert not (matcher.accept_string(bad) and matcher.accept_token(sampler.tokenizer.eos_token_id))


def test_named_and_parallel(sampler: Sampler) -> None:
    one = sampler.compile("named", named="noop", parallel=False)
    for text, ok in [("[noop()]", True), ("[noop(), noop()]", False), ("[book.trip(city='x', tags=['a'])]", False)]:
        matcher = xgr.GrammarMatcher(one)
        assert (matcher.accept_string(text) and matcher.accept_token(sampler.tokenizer.eos_token_id)) == ok, text

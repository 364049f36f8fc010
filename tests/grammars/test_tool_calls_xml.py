"""The tool-call grammars of the XML formats (qwen3_coder, glm45) and of deepseek_v31,
kimi_k2, harmony and deepseek_v32 (real xgrammar, tiny Qwen3 tokenizer: the markers are
spelled in ordinary tokens, which is what grammar and parser must agree on) against
their parser.

Property: every output the grammar admits parses back (``runtime_ext.parsers`` with the
tools' schemas) into calls whose typed arguments are valid under the tool's schema, with
no marker in content or arguments. Outputs are random walks of a GrammarMatcher over the
real vocabulary, biased towards punctuation, whitespace and pieces of the format's
markers (so raw string values close).
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
from grammars.tool_calls import ToolSpec, XmlSchemaError, tool_call_constraint
from runtime_ext.formats import get_format, render_calls
from runtime_ext.formats.tool_formats import DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END, DEEPSEEK_CALLS_END
from runtime_ext.parsers import parse

TOKENIZER_DIR = default_cache_dir() / "models" / "qwen3-tiny"
FORMATS = ["qwen3_coder", "glm45"]
ONE_CALL = ["kimi_k2", "harmony", "deepseek_v32"]
"""Walked with parallel off: their markers take many tokens here, two calls rarely end in a walk."""
WALKED = [*FORMATS, "deepseek_v31", *ONE_CALL]
RICH = ToolSpec(
    "book_trip",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "where"},
            "days": {"type": "integer"},
            "budget": {"type": ["number", "null"]},
            "unit": {"enum": ["c", "f"]},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
            "who": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["age"],
                "additionalProperties": False,
            },
        },
        "required": ["city", "days"],
    },
)
NOOP = ToolSpec("noop")
TOOLS = [RICH, NOOP]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
PUNCT = set('"[]{},:0123456789.-e')
SPACE = {chr(c) for c in range(33)} | {"\x7f", "\u2028", "\u00a0"}
WALK_MARKERS = {f: (get_format(f).value_end, get_format(f).call_end, get_format(f).key_start) for f in FORMATS}
WALK_MARKERS["deepseek_v31"] = (DEEPSEEK_CALL_END, DEEPSEEK_CALLS_END, DEEPSEEK_CALL_BEGIN)
WALK_MARKERS["kimi_k2"] = ("<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>")
WALK_MARKERS["harmony"] = (" <|constrain|>json<|message|>",)
WALK_MARKERS["deepseek_v32"] = ('">\n', "\n</\uff5cDSML\uff5cinvoke>", "\n</\uff5cDSML\uff5cfunction_calls>")
"""The closing texts a walk is steered to finish once begun (a string value ends only there)."""


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
        self.kinds = []  # preferred classes: punctuation, whitespace
        texts = [m for ms in WALK_MARKERS.values() for m in ms]
        self.marker_pieces = {i: p for i, p in enumerate(self.pieces) if p and any(p in m for m in texts)}
        for test in (lambda p: set(p) <= PUNCT, lambda p: set(p) <= SPACE):
            kind = np.zeros(self.vocab, dtype=bool)
            kind[[i for i, p in enumerate(self.pieces) if p and test(p)]] = True
            self.kinds.append(kind)

    def compile(self, fmt: str, mode: str, tools: list[ToolSpec] = TOOLS, **kw: Any) -> Any:
        return self.compiler.compile_structural_tag(tool_call_constraint(fmt, tools, mode, **kw).value)

    def admits(self, grammar: Any, text: str) -> bool:
        matcher = xgr.GrammarMatcher(grammar)
        return matcher.accept_string(text) and matcher.accept_token(self.tokenizer.eos_token_id)

    def walk(self, grammar: Any, rng: random.Random, markers: tuple[str, ...], start: str = "") -> str | None:
        """A random output the grammar admits that starts with ``start`` (None if it did not
        end within 400 tokens); ``markers``: texts to steer towards."""
        matcher, ids = xgr.GrammarMatcher(grammar), []
        assert matcher.accept_string(start)

        def text() -> str:  # decoded whole: a character may span tokens
            return start + self.tokenizer.decode(ids)

        mask = xgr.allocate_token_bitmask(1, self.vocab)
        eos = self.tokenizer.eos_token_id
        for _ in range(400):
            matcher.fill_next_token_bitmask(mask)
            flags = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")[: self.vocab].astype(bool)
            if flags[eos] and rng.random() < 0.3:
                return text()
            flags[eos] = False
            flags[len(self.pieces) :] = False
            so_far, kind = text(), rng.randrange(3)
            inside = self.continuing(so_far, flags, markers, started=True)
            if inside and rng.random() < 0.9:  # finish a marker the text has begun
                kind, preferred = 3, inside
            else:
                preferred = (
                    self.continuing(so_far, flags, markers) if kind == 2 else np.nonzero(flags & self.kinds[kind])[0]
                )
            pool = preferred if len(preferred) and rng.random() < 0.85 else np.nonzero(flags)[0]
            if not len(pool):
                return text()
            token = int(rng.choice(list(pool)))
            assert matcher.accept_token(token)
            ids.append(token)
        return None

    def continuing(self, text: str, flags: Any, markers: tuple[str, ...], started: bool = False) -> list[int]:
        """Allowed tokens that continue a marker the text ends inside (or start one)."""
        wants = [m[k:] for m in markers for k in range(int(started), len(m)) if text.endswith(m[:k])]
        return [i for i, p in self.marker_pieces.items() if flags[i] and any(w.startswith(p) for w in wants)]


@pytest.fixture(scope="module")
def sampler() -> Sampler:
    return Sampler()


def check_parses_back(fmt: str, text: str) -> list[tuple[str, Any]]:
    """The calls of ``text``: schema-valid; no marker in the content, and the closing marker
    of a value in no argument (other markers are text a raw value may hold, e.g. a file)."""
    result = parse(fmt, text, [t.name for t in TOOLS], SCHEMAS)
    assert not result.incomplete and result.content.strip() in ("", "hi"), text
    calls = [(c.name, json.loads(c.arguments)) for c in result.calls]
    assert calls, text
    closing = (get_format(fmt).value_end or DEEPSEEK_CALL_END).split()[0]
    for name, args in calls:
        Draft202012Validator(SCHEMAS[name] or {"type": "object", "additionalProperties": False}).validate(args)
        assert closing not in json.dumps(args, ensure_ascii=False), text
    return calls


@pytest.mark.parametrize("fmt", WALKED)
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_everything_the_grammar_admits_parses_back_to_valid_calls(sampler: Sampler, fmt: str, mode: str) -> None:
    grammar = sampler.compile(fmt, mode, parallel=fmt not in ONE_CALL)
    rng = random.Random(1234)
    start = "hi " + get_format(fmt).opener if mode == "auto" else ""
    outputs = [o for o in (sampler.walk(grammar, rng, WALK_MARKERS[fmt], start) for _ in range(20)) if o is not None]
    assert len(outputs) >= 10, f"only {len(outputs)} walks ended"
    for text in outputs:
        check_parses_back(fmt, text)


ARGS = {
    "city": "a</tool_call> <b>\n",
    "days": 3,
    "budget": None,
    "unit": "f",
    "ok": True,
    "tags": [1],
    "who": {"age": 2},
}


@pytest.mark.parametrize("fmt", [f for f in WALKED if f != "harmony"])  # harmony: one call per turn
def test_canonical_renderings_are_admitted_and_round_trip_typed(sampler: Sampler, fmt: str) -> None:
    text = render_calls(get_format(fmt), [("book_trip", json.dumps(ARGS)), ("noop", "{}")])
    assert sampler.admits(sampler.compile(fmt, "required"), text)
    assert check_parses_back(fmt, text) == [("book_trip", ARGS), ("noop", {})]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "args",
    [
        {"days": 1},  # required city missing
        {"city": "x", "days": "three"},  # an integer parameter holding text
        {"city": "x", "days": 1.5},  # integer
        {"city": "x", "days": 1, "unit": "k"},  # enum
        {"city": "x", "days": 1, "tags": [1, 2, 3]},  # maxItems
        {"city": "x", "days": 1, "who": {"name": "n"}},  # nested required
        {"days": 1, "city": "x"},  # schema order
        {"city": "x", "days": 1, "zzz": 1},  # undeclared
    ],
)
def test_outside_the_schema_is_refused(sampler: Sampler, fmt: str, args: dict[str, Any]) -> None:
    text = render_calls(get_format(fmt), [("book_trip", json.dumps(args))])
    assert not sampler.admits(sampler.compile(fmt, "required"), text)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_string_value_cannot_hold_its_closing_marker(sampler: Sampler, fmt: str) -> None:
    closing = get_format(fmt).value_end.split()[0]
    text = render_calls(get_format(fmt), [("book_trip", json.dumps({"city": f"a{closing}b", "days": 1}))])
    assert not sampler.admits(sampler.compile(fmt, "required"), text)


@pytest.mark.parametrize("fmt", FORMATS)
def test_named_and_parallel(sampler: Sampler, fmt: str) -> None:
    f = get_format(fmt)
    one, two = render_calls(f, [("noop", "{}")]), render_calls(f, [("noop", "{}"), ("noop", "{}")])
    trip = render_calls(f, [("book_trip", '{"city": "x", "days": 1}')])
    named = sampler.compile(fmt, "named", named="noop", parallel=False)
    assert [sampler.admits(named, t) for t in (one, two, trip)] == [True, False, False]
    parallel = sampler.compile(fmt, "required", parallel=True)
    assert [sampler.admits(parallel, t) for t in (one, two, trip, "text")] == [True, True, True, False]
    auto = sampler.compile(fmt, "auto", parallel=False)
    assert [sampler.admits(auto, t) for t in ("free text", "x " + one, "x " + two, one + " after")] == [
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "parameters, keyword",
    [
        ({"type": "object", "properties": {"q": {"type": ["string", "integer"]}}}, "type"),
        ({"type": "object", "properties": {"q": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}, "type"),
        ({"type": "object", "properties": {"q": {}}}, None),
        ({"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}}, "pattern"),
        ({"type": "object", "properties": {"q": {"type": "string", "maxLength": 3}}}, "maxLength"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "additionalProperties"),
        ({"type": "object", "properties": {"a<b": {"type": "integer"}}}, "properties"),
        ({"type": "object", "properties": {"q": {"$ref": "#/$defs/x"}}}, "$ref"),
        ({"type": "object", "patternProperties": {}}, "patternProperties"),
    ],
)
def test_a_schema_the_format_cannot_enforce_is_refused_naming_the_tool(
    fmt: str, parameters: dict[str, Any], keyword: str | None
) -> None:
    with pytest.raises(XmlSchemaError) as info:
        tool_call_constraint(fmt, [ToolSpec("t", parameters)], "required")
    assert (info.value.tool, info.value.field, info.value.keyword) == ("t", "parameters", keyword)
    assert "tool 't'" in info.value.message and fmt in info.value.message


def test_kimi_call_counter_is_forced_any_number(sampler: Sampler) -> None:
    head = "<|tool_calls_section_begin|><|tool_call_begin|>functions.noop"
    tail = "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"
    grammar = sampler.compile("kimi_k2", "required", parallel=False)
    admitted = [sampler.admits(grammar, f"{head}{counter}{tail}") for counter in (":0", ":417", "", ":x", ":1234567")]
    assert admitted == [True, True, False, False, False]


def test_harmony_is_one_call_ending_at_its_arguments(sampler: Sampler) -> None:
    """Its <|call|> is the turn's stop token (gpt-oss's EOS ids), so the grammar ends at the arguments."""
    fmt = get_format("harmony")
    bare = render_calls(fmt, [("noop", "{}")]).removesuffix("<|call|>")
    two = render_calls(fmt, [("noop", "{}"), ("noop", "{}")]).removesuffix("<|call|>")
    required = sampler.compile("harmony", "required", parallel=True)
    assert [sampler.admits(required, t) for t in (bare, two, bare + "<|call|>", "text")] == [True, False, False, False]
    auto = sampler.compile("harmony", "auto")
    final = "<|channel|>final<|message|>It is sunny."
    assert [sampler.admits(auto, t) for t in (final, final + " " + bare, bare + " after")] == [True, True, False]
    text = render_calls(fmt, [("book_trip", json.dumps(ARGS))])
    assert sampler.admits(required, text.removesuffix("<|call|>"))
    assert check_parses_back("harmony", text) == [("book_trip", ARGS)]

"""Client regexes on RE2 (grammars.json_schema.patterns, grammars.json_schema.validation): the verdicts jsonschema gives
with Python's ``re`` on ordinary patterns, ECMA-262's where the dialects differ, linear time on
a catastrophic pattern, and a clear refusal of what RE2 cannot run."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from grammars.errors import UncheckablePatternError
from grammars.json_schema import check_schema, first_error
from grammars.json_schema.patterns import PatternError, compile_pattern, search

DATA = Path(__file__).parents[2] / "data"
CATASTROPHIC = r"^(a+)+$"


def _corpus_patterns() -> list[str]:
    from grammars.json_schema import iter_subschemas

    schemas = [t["function"].get("parameters") or {} for t in json.loads((DATA / "tools.json").read_text())]
    schemas += [e["schema"] for e in json.loads((DATA / "json_schemas.json").read_text())]
    found = {
        n.value["pattern"]
        for s in schemas
        for n in iter_subschemas(s)
        if isinstance(n.value, dict) and "pattern" in n.value
    }
    return sorted(found)


ORDINARY = [
    r"^[a-z0-9_]{1,20}$",
    r"^\d{3}-\d{4}$",
    r"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$",
    r"^(cat|dog|bird)s?$",
    r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$",
    r"^\w+\.(json|yaml)$",
    r"colou?r",
    r"^\u0041+\d?$",
    r"^(?:[01]\d|2[0-3]):[0-5]\d$",
    r"[.]",
]
PROBES = ["", "a", "abc", "abc_9", "ABC", "555-1234", "New York", "cats", "me@x.io", "x.json", "color", "colour",
          "AAA1", "23:59", "24:00", "a.b", "ab", "a b", "é", "12", "x@y", "_", "dog", "Cat"]  # fmt: skip


def test_ordinary_patterns_match_as_with_re():
    patterns = _corpus_patterns() + ORDINARY
    assert len(patterns) >= 15
    wrong = [(p, s) for p in patterns for s in PROBES if search(p, s) != (re.search(p, s) is not None)]
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("pattern", "text", "ecma"),
    [
        (r"^\d$", "\u0663", False),  # ECMA \d is ASCII (Python's re: any Unicode digit)
        (r"^\s$", "\u00a0", True),  # ECMA \s includes no-break space (RE2's own \s does not)
        (r"^\s$", "\x0b", True),
        (r"^\S$", "\u3000", False),
        (r"^a.b$", "a\rb", False),  # ECMA . excludes \r, U+2028, U+2029
        (r"^a.b$", "a\u2028b", False),
        (r"^a.b$", "axb", True),
        (r"^ab$", "ab\n", False),  # ECMA $ is the end (Python's re: also before a final \n)
        (r"^\cJ$", "\n", True),
        (r"^[\b]$", "\x08", True),
        (r"^\u{1F600}$", "\U0001f600", True),
    ],
)
def test_ecma_262_meaning_where_the_dialects_differ(pattern, text, ecma):
    assert search(pattern, text) is ecma


def test_a_catastrophic_pattern_is_linear():
    """Python's ``re`` needs minutes for this (2^n steps; n = 30 here, and 5000 below)."""
    began = time.perf_counter()
    assert not search(CATASTROPHIC, "a" * 30 + "b")
    assert not search(r"(a|aa)+$", "a" * 5000 + "b")
    error = first_error({"s": "a" * 5000 + "b"}, {"properties": {"s": {"type": "string", "pattern": CATASTROPHIC}}})
    assert error is not None and "does not match" in error.message
    keys = {"a" * 5000 + "b": 1, "aaaa": "x"}
    schema = {"patternProperties": {CATASTROPHIC: {"type": "integer"}}, "additionalProperties": False}
    assert first_error(keys, schema) is not None  # "aaaa" matches, its value is no integer
    assert time.perf_counter() - began < 1.0


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^(a)\1$", "backreference"),
        (r"^(?<x>a)\k<x>$", "backreference"),
        (r"^(?=a)\w+$", "lookahead"),
        (r"(?<!a)b", "lookahead"),
        (r"^[]$", "`[]`"),
        (r"^.{1,5000}$", "repetition"),
        (r"^.{1,1000}.{1,1000}.{1,1000}$", "too large"),
    ],
)
def test_what_re2_cannot_run_is_refused_by_the_policy(pattern, why):
    with pytest.raises(PatternError, match=re.escape(why)):
        compile_pattern(pattern)
    for schema, pointer, keyword in (
        ({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}, "/properties/s", "pattern"),
        ({"type": "object", "patternProperties": {pattern: {}}}, "", "patternProperties"),
    ):
        with pytest.raises(UncheckablePatternError) as caught:
            check_schema(schema, allow_loosening=True)
        assert (caught.value.pointer, caught.value.keyword) == (pointer, keyword)
        assert why in caught.value.message


def test_the_policy_checks_declared_names_against_patterns_in_linear_time():
    name = "a" * 5000 + "b"
    schema = {"type": "object", "properties": {name: {"type": "boolean"}, "aaaa": {"type": "boolean"}},
              "patternProperties": {CATASTROPHIC: {"type": "string"}}}  # fmt: skip
    began = time.perf_counter()
    checked = check_schema(schema, allow_loosening=True)
    assert [u.keyword for u in checked.loosened] == ["patternProperties"]  # "aaaa" clashes
    assert time.perf_counter() - began < 1.0


def test_a_text_that_is_no_regex_is_left_to_the_grammar_compiler():
    """(It names the syntax error: ``GrammarCompileError``, tests/grammars/test_compile_check_cli.py.)"""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|b$"}}}
    assert check_schema(schema).schema == schema

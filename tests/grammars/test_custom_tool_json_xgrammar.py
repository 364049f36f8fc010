"""A custom tool's input inside the JSON call frame (grammars/lark/custom_tool_json.py), compiled by
real xgrammar: every argument object the grammar admits decodes (json.loads) to an input the
tool's grammar accepts (the real lark parser, or re.fullmatch), and every input of the grammar
has its encoding."""

from __future__ import annotations

import json
import random
import re

import lark
import pytest

from grammars.lark import ARGUMENTS_PREFIX, InputStream, custom_arguments_ebnf
from tests.grammars.test_lark_xgrammar import Oracle

LARK = 'start: "say " QUOTED (", " QUOTED)*\nQUOTED: "\\"" /[a-z\\\\\\n]{0,4}/ "\\""\n'
REGEX = r'[a-z"\\]{1,5}\t\d'


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def decoded(text: str) -> str:
    value = json.loads(text)
    assert list(value) == ["input"]
    return value["input"]


@pytest.mark.parametrize(
    "syntax, definition, accepts",
    [
        ("lark", LARK, lambda s: _lark(s)),
        ("regex", REGEX, lambda s: re.fullmatch(REGEX, s) is not None),
        (None, "", lambda s: True),
    ],
    ids=["lark", "regex", "free"],
)
def test_every_admitted_object_decodes_to_an_input_of_the_grammar(oracle, syntax, definition, accepts):
    compiled = oracle.compile(custom_arguments_ebnf(syntax, definition))
    rng, seen = random.Random(11), 0
    for _ in range(150):
        out = oracle.walk(compiled, rng, steps=80)
        if out is None:
            continue
        seen += 1
        assert out.startswith(ARGUMENTS_PREFIX)
        value = decoded(out)
        assert accepts(value), (out, value)
        stream = InputStream()
        assert "".join(stream.feed(out[i : i + 3]) for i in range(0, len(out), 3)) == value
    assert seen >= 20


@pytest.mark.parametrize(
    "syntax, definition, good, bad",
    [
        ("lark", LARK, ['say "a\\"', 'say "", "b\nc"'], ['say "A"', 'say "abcde"']),
        ("regex", REGEX, ['a"\\\t7', "zz\t٣"], ["a\t", "abcdef\t1"]),
        (None, "", ["", 'any "text"\n\\ \u0001 é'], []),
    ],
)
def test_each_input_of_the_grammar_has_its_encoding(oracle, syntax, definition, good, bad):
    compiled = oracle.compile(custom_arguments_ebnf(syntax, definition))
    for text in good:
        assert oracle.accepts(compiled, json.dumps({"input": text}, ensure_ascii=False)), text
    for text in bad:
        assert not oracle.accepts(compiled, json.dumps({"input": text}, ensure_ascii=False)), text


def _lark(text: str) -> bool:
    try:
        lark.Lark(LARK, start="start", parser="earley", lexer="dynamic").parse(text)
    except lark.exceptions.LarkError:
        return False
    return True

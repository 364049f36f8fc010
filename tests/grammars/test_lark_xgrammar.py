"""Translated Lark grammars, compiled by real xgrammar, against the real ``lark`` package.

Oracle: ``lark.Lark(definition, start="start", parser="earley", lexer="dynamic")``.

- soundness: every output a random walk of an xgrammar matcher produces over the translated
  grammar (character vocabulary, fixed seed) parses with Lark: nothing looser;
- completeness: hand-written strings Lark accepts are accepted, those it rejects are refused;
- the refusals of overlapping terminals are needed: without the lexing check the translation
  would admit strings Lark rejects;
- the pieces Lark delegates to Python's ``re`` (escapes, ``\\d \\w \\s``, the ``i`` flag) agree
  with Python's ``re`` over every code point.
"""

from __future__ import annotations

import random
import re
from typing import Any

import lark
import numpy as np
import pytest
import xgrammar as xgr  # noqa: E402 -- pinned: a missing one is a failure, not a skip

from grammars.errors import UnsupportedGrammarError
from grammars.lark import choice_to_ebnf, lark_to_ebnf, regex_to_ebnf
from grammars.lark.ebnf import char_class
from grammars.lark.literals import lark_unescape
from grammars.lark.nodes import complement, fold_ascii_case, unicode_class

# One token per character, a few non-ASCII ones (cased, digits, spaces, astral), and a stop.
CHARS = [chr(c) for c in range(0x20, 0x7F)] + list("\t\n\r\f\v") + list("éÉß٣İıKſ中€\u00a0\u2028😀")
VOCAB = CHARS + ["</s>"]
STOP = len(VOCAB) - 1
PUNCT = np.array([not c.isalnum() for c in CHARS] + [False])
ALL = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


class Oracle:
    def __init__(self) -> None:
        info = xgr.TokenizerInfo(VOCAB, stop_token_ids=[STOP])
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)

    def compile(self, ebnf: str) -> Any:
        return self.compiler.compile_grammar(ebnf)

    def accepts(self, compiled: Any, text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(text) and matcher.accept_token(STOP) and matcher.is_terminated()

    def walk(self, compiled: Any, rng: random.Random, steps: int = 120) -> str | None:
        """A random output the grammar admits (None if it did not end within ``steps``)."""
        matcher, out = xgr.GrammarMatcher(compiled), []
        mask = xgr.allocate_token_bitmask(1, len(VOCAB))
        for _ in range(steps):
            matcher.fill_next_token_bitmask(mask)
            allowed = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")[: len(VOCAB)].astype(bool)
            if allowed[STOP] and (rng.random() < 0.25 or allowed.sum() == 1):
                return "".join(out)
            allowed[STOP] = False
            punct = np.nonzero(allowed & PUNCT)[0]
            pool = punct if len(punct) and rng.random() < 0.5 else np.nonzero(allowed)[0]
            token = int(rng.choice(list(pool)))
            assert matcher.accept_token(token)
            out.append(VOCAB[token])
        return None


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def lark_parser(definition: str) -> lark.Lark:
    return lark.Lark(definition, start="start", parser="earley", lexer="dynamic")


def lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


# name: (definition, strings Lark accepts, strings Lark rejects)
GRAMMARS: dict[str, tuple[str, list[str], list[str]]] = {
    "arithmetic": (
        r"""
        ?start: sum
        ?sum: product | sum ("+" | "-") product
        ?product: atom | product ("*" | "/") atom
        ?atom: NUMBER | "-" atom | "(" sum ")"
        %import common.NUMBER
        %import common.WS_INLINE
        %ignore WS_INLINE
        """,
        ["1", " 1 + 2*3 ", "-(1.5e3 - .5)/2", "((1))", "1.", "\t2 *\t-3"],
        ["", "1 +", "()", "1 2", "1\n+2", "1..2", "1e", "+1"],
    ),
    "json": (
        r"""
        start: value
        ?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
        array: "[" [value ("," value)*] "]"
        object: "{" [pair ("," pair)*] "}"
        pair: ESCAPED_STRING ":" value
        %import common (ESCAPED_STRING, SIGNED_NUMBER, WS)
        %ignore WS
        """,
        ['{"a": [1, -2.5e-3, "x\\"y", true, null], "b\\\\": {}}', " [ ] ", '"é😀"', "-0"],
        ['{"a" 1}', "[1,]", "tru", '"a\nb"', '"\\"', "{1: 2}", "[1 2]", "nulll"],
    ),
    "sql": (
        r"""
        start: "SELECT"i _WS cols _WS "FROM"i _WS CNAME [_WS "LIMIT"i _WS INT]
        cols: "*" | CNAME ("," _SP? CNAME) ~ 0..3
        _WS: /[ \t]+/
        _SP: " "
        %import common (CNAME, INT)
        """,
        ["SELECT * FROM t", "select a, b,c FROM tab_1 limit 10", "SeLeCt x FROM y\tLIMIT 0", "select a from b lımıt 1"],
        ["SELECT a,b,c,d,e FROM t", "SELECT * FROM", "SELECT a,  b FROM t", "SELECTa FROM t", "SELECT * FROM 1t"],
    ),
    "regex_features": (
        r"""
        start: DATE " " TIME " " HEX " " ID
        DATE: /\d{4}-\d{2}-\d{2}/
        TIME: /([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?/
        HEX: /0x[0-9a-f]{1,8}/i
        ID: /[A-Za-z_](?:[\w.-]*\w)?/
        """,
        ["2024-01-31 23:59 0xdeadBEEF a.b-c", "٣٣٣٣-01-01 00:00:00 0X1 aé٣", "2024-01-01 09:05 0xa _"],
        [
            "2024-1-31 23:59 0x1 a",
            "2024-01-31 24:00 0x1 a",
            "2024-01-31 23:59 0x123456789 a",
            "2024-01-31 23:59 0x1 a.",
        ],
    ),
    "repetition": (
        r"""
        start: ("ab" | "c") ~ 2..4 "!" ~ 3 ["x"] "y"? DIGITS
        DIGITS: ("0".."9") ~ 1..2
        """,
        ["abc!!!1", "cccc!!!xy12", "abab!!!y9", "ccab!!!x0"],
        ["c!!!1", "ccccc!!!1", "cc!!1", "cc!!!!1", "cc!!!123", "cc!!!yx1", "cc!!!"],
    ),
    "long_counts": (
        r"""
        start: NAME ":" TEXT "\n"
        NAME: /[a-z_]{1,64}/
        TEXT: /[^\n]{1,300}/
        """,
        ["ab:x\n", "a" * 64 + ": " + "é" * 299 + "\n"],
        ["a" * 65 + ":x\n", "ab:\n", "ab:" + "x" * 301 + "\n", "ab:x"],
    ),
    "ignored_comments": (
        r"""
        start: stmt+
        stmt: CNAME "=" INT ";"
        COMMENT: /#[^\n]*\n/
        %import common (CNAME, INT, WS)
        %ignore WS
        %ignore COMMENT
        """,
        ["a=1;", " # hi\n a = 1 ; # c\n# d\nb=22;\n", "x=1;y=2;"],
        ["", "a=1", "a=1; #", "a = 1 2;", "a b=1;"],
    ),
    "words_repeated": (
        r"""
        start: WORD+ "."
        %import common (WORD, WS_INLINE)
        %ignore WS_INLINE
        """,
        ["ab.", "ab cd .", " a\tb  c. "],
        [".", "ab", "a.b.", "a1."],
    ),
    "ignore_single_char": (
        r"""
        start: "a" " b" ("," "c")*
        %ignore " "
        """,
        ["a b", "a  b", "a   b", " a  b , c ,c"],
        ["ab", "a b,", "a\tb", "a b c"],
    ),
    "shapes_and_ranges": (
        r"""
        !start: greeting+ -> hello
        greeting.2: ("hi" | "yo"i) NAME?
        NAME.1: "_" ("a".."f") ~ 1..3
        """,
        ["hi", "hi_abc", "YOhi_f", "yO_ayo"],
        ["", "hi_", "hi_abcd", "hi_g", "ho"],
    ),
    "flags_and_unicode": (
        r"""
        start: /[a-z]+/i " " /x.y/s " " /\d+/ "€" /\s/ "😀" /[^"\\\n\r]+/ LINES
        LINES: (CR? LF)+
        %import common (CR, LF)
        """,
        ["aBc x\ny ٣4€\u00a0😀中\r\n\n", "Z x y 0€ 😀'\n"],
        ["a xy 1€ 😀a\n", 'a x\ny 1€ 😀"\n', "a x y 1€  😀a", "a x y a€ 😀a\n"],
    ),
    "comments_common": (
        r"""
        start: (C_COMMENT | "x") (NEWLINE (C_COMMENT | "x"))* | CPP_COMMENT | SH_COMMENT | SQL_COMMENT
        %import common (C_COMMENT, CPP_COMMENT, SH_COMMENT, SQL_COMMENT, NEWLINE)
        """,
        ["/* a */", "/***/\r\n/*/*/", "// x", "# y", "-- z", "x\n\nx"],
        ["/*/", "/* */ */", "x\n", "/* a", "// a\n", "x\n# y"],
    ),
}


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_everything_the_translation_admits_parses_with_lark(oracle: Oracle, name: str) -> None:
    definition = GRAMMARS[name][0]
    compiled, parser = oracle.compile(lark_to_ebnf(definition)), lark_parser(definition)
    rng = random.Random(20240531)
    outputs = {o for o in (oracle.walk(compiled, rng) for _ in range(50)) if o is not None}
    assert len(outputs) >= 8, f"only {len(outputs)} distinct walks ended: {outputs}"
    for text in sorted(outputs):
        assert lark_accepts(parser, text), f"{name}: the translation admits {text!r}, Lark rejects it"


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_strings_lark_accepts_are_admitted_and_those_it_rejects_are_refused(oracle: Oracle, name: str) -> None:
    definition, good, bad = GRAMMARS[name]
    compiled, parser = oracle.compile(lark_to_ebnf(definition)), lark_parser(definition)
    for text in good:
        assert lark_accepts(parser, text), f"test data: Lark rejects {text!r}"
        assert oracle.accepts(compiled, text), f"{name}: Lark accepts {text!r}, the translation refuses it"
    for text in bad:
        assert not lark_accepts(parser, text), f"test data: Lark accepts {text!r}"
        assert not oracle.accepts(compiled, text), f"{name}: Lark rejects {text!r}, the translation admits it"


COMMON = [
    "DIGIT", "HEXDIGIT", "INT", "SIGNED_INT", "DECIMAL", "FLOAT", "SIGNED_FLOAT", "NUMBER", "SIGNED_NUMBER",
    "ESCAPED_STRING", "LCASE_LETTER", "UCASE_LETTER", "LETTER", "WORD", "CNAME", "WS_INLINE", "WS", "CR", "LF",
    "NEWLINE", "SH_COMMENT", "CPP_COMMENT", "C_COMMENT", "SQL_COMMENT",
]  # fmt: skip
PROBES = [
    "0", "7", "12", "-3", "+4.5", "1e5", "1E-2", ".5", "1.", "1.e3", "-.5e+7", "e5", "1e", "--1", "abc", "Ab", "f", "F",
    "a_1", "_x", "1a", "é", "٣", " ", "\t \t", "\t\n", "\r\n", "\n\n\r\n", "\r", "\f", '"a\\"b"', '""', '"\\\\"',
    '"a"b"', '"\\"', '"x\ny"', '"é\\\\\\u"', "# c", "#", "// c", "/", "/* c */", "/**/", "/* a */ */", "/*/", "-- c",
    "-", "x y",
]  # fmt: skip


@pytest.mark.parametrize("name", COMMON)
def test_common_terminals_admit_what_lark_admits(oracle: Oracle, name: str) -> None:
    definition = f"start: {name}\n%import common.{name}\n"
    compiled, parser = oracle.compile(lark_to_ebnf(definition)), lark_parser(definition)
    for text in PROBES:
        assert oracle.accepts(compiled, text) == lark_accepts(parser, text), f"{name} on {text!r}"
    rng = random.Random(7)
    for text in filter(None, (oracle.walk(compiled, rng) for _ in range(15))):
        assert lark_accepts(parser, text), f"{name}: the translation admits {text!r}, Lark rejects it"


STRINGS = [r'"a\"b"', r'"\\"', r'"\d"', r'"\n\t\r\f"', r'"\\n"', r'"\u00e9\x41"', r'"it\'s"', r'"\U0001F600"', '"é"']
REGEXES = [r"/\\/", r"/\//", r"/\"/", r"/\d\n/", r"/\x41\u00e9/", r"/[\\\]]/", r"/a\.b/"]


@pytest.mark.parametrize("spelled", STRINGS + REGEXES)
def test_literal_escapes_decode_as_lark_decodes_them(oracle: Oracle, spelled: str) -> None:
    definition = f"start: {spelled}\n"
    (terminal,) = lark_parser(definition).terminals
    assert lark_unescape(spelled[1:-1], spelled[0] == '"', 1) == terminal.pattern.value
    value = terminal.pattern.value if spelled[0] == '"' else None
    if value is not None:
        assert oracle.accepts(oracle.compile(lark_to_ebnf(definition)), value)


PATTERNS = {
    r"[a-c]+x?": (["a", "abcx", "cc"], ["", "x", "ad", "ax x"]),
    r"(?:ab|c){2,3}": (["abc", "cab", "ccc", "ababab"], ["ab", "abababab", "ac"]),
    r"[^a-z\d]{,2}": (["", "A", "é!", "A\n"], ["a", "٣", "ABC"]),
    r"(a|)b{3}c{1,}": (["bbbc", "abbbcc"], ["bbc", "abbb", "aabbbc"]),
    r"\W\S\s\D": (["!a\t!", "\nb\u2028x"], ["a a a", "!!!!", "!\u00a0 !", "😀"]),  # 😀: xgrammar range bug
    r".\.[.]": (["x.."], ["\n..", "xa.", "x.a"]),
    r"x{}y{": (["x{}y{"], ["xy", "x{y{"]),
    r"(?P<n>[\]\-^]+)|\N{EURO SIGN}": (["]-^", "€"], ["[", "a"]),
}


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_regex_translation_matches_python_fullmatch(oracle: Oracle, pattern: str) -> None:
    compiled = oracle.compile(regex_to_ebnf(pattern))
    good, bad = PATTERNS[pattern]
    for text in good + bad:
        expected = re.fullmatch(pattern, text) is not None
        assert expected == (text in good), f"test data: {pattern!r} on {text!r}"
        assert oracle.accepts(compiled, text) == expected, f"{pattern!r} on {text!r}"
    rng = random.Random(11)
    for text in filter(None, (oracle.walk(compiled, rng) for _ in range(20))):
        assert re.fullmatch(pattern, text), f"{pattern!r}: the translation admits {text!r}"


@pytest.mark.parametrize("pattern", [r"[a-c]+x?", r"(?:ab|c)(?:ab|c)c?", r"[^a-z0-9]?[^a-z0-9]?", r"a\.b*[.]"])
def test_regex_translation_agrees_with_xgrammars_own_converter(oracle: Oracle, pattern: str) -> None:
    ours, theirs = oracle.compile(regex_to_ebnf(pattern)), oracle.compile(xgr.testing._regex_to_ebnf(pattern))
    for text in ["", "a", "abcx", "abab", "abcc", "!", "!?", "a.", "a.bb.", "xa", "A!", "a.b"]:
        assert oracle.accepts(ours, text) == oracle.accepts(theirs, text), f"{pattern!r} on {text!r}"


def test_case_folding_and_unicode_classes_match_python_re() -> None:
    for code in range(0x80):
        expected = {m.group() for m in re.finditer(re.escape(chr(code)), ALL, re.I)}
        got = fold_ascii_case(((code, code),))
        assert got is not None
        assert {chr(c) for lo, hi in got for c in range(lo, hi + 1)} == expected, repr(chr(code))
    for letter in "dDwWsS":
        for flags in (0, re.I):  # the classes are closed under case folding
            expected_count = sum(1 for _ in re.finditer(f"\\{letter}", ALL, flags))
            ranges = unicode_class(letter)
            assert sum(hi - lo + 1 for lo, hi in ranges) == expected_count, letter
        assert all(re.fullmatch(f"\\{letter}", chr(lo)) and re.fullmatch(f"\\{letter}", chr(hi)) for lo, hi in ranges)


# Refused grammars, and a string the translation would admit without the refusal but Lark rejects.
OVERLAPS = {
    "adjacent words": ("start: WORD WORD\n%import common.WORD", "ab"),
    "number then dot": ('start: NUMBER "." INT\n%import common (NUMBER, INT)', "1.5"),
    "ignored run eats a literal": ('start: "a" " b"\n%import common.WS\n%ignore WS', "a  b"),
    "ignored whitespace eats a newline": ('start: "a" NEWLINE "b"\n%import common (WS, NEWLINE)\n%ignore WS', "a \nb"),
    "repetition with a lower bound": ("start: WORD ~ 2\n%import common.WORD", "ab"),
    "terminal runs into the ignored": ('start: A "b"\nA: /a( b)?/\n%ignore " "', "a b"),
}


@pytest.mark.parametrize("name", sorted(OVERLAPS))
def test_refused_overlaps_would_otherwise_admit_what_lark_rejects(
    oracle: Oracle, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    definition, text = OVERLAPS[name]
    with pytest.raises(UnsupportedGrammarError, match="overlapping|cannot be translated exactly"):
        lark_to_ebnf(definition)
    monkeypatch.setattr("grammars.lark.translate.check_lexing", lambda *args: None)
    assert oracle.accepts(oracle.compile(lark_to_ebnf(definition)), text)
    assert not lark_accepts(lark_parser(definition), text)


def test_documented_difference_python_alternation_order(oracle: Oracle) -> None:
    """Lark's Python regex takes the first match its backtracking finds (``a`` of ``/a|ab/``);
    the translation, like llguidance's longest match, admits ``ab`` (module docstring)."""
    for definition, text in (("start: /a|ab/", "ab"), ("start: /xa?(ab)?/", "xab")):
        assert oracle.accepts(oracle.compile(lark_to_ebnf(definition)), text)
        assert not lark_accepts(lark_parser(definition), text)
    assert lark_accepts(lark_parser("start: /ab|a/"), "ab")


def test_choices_admit_exactly_the_choices(oracle: Oracle) -> None:
    choices = ['say "hi"', "back\\slash", "new\nline", "tab\t", "é😀中", "", "\x00\x7f", "dup", "dup", "a]b[-^"]
    compiled = oracle.compile(choice_to_ebnf(choices))
    for text in choices:
        assert oracle.accepts(compiled, text), repr(text)
    for text in ['say "hi', "back\\\\slash", "newline", "é", "dupdup", " ", "a]b[-"]:
        assert not oracle.accepts(compiled, text), repr(text)


def test_compiles_for_the_real_tokenizer() -> None:
    import transformers

    from assets import default_cache_dir

    tokenizer_dir = default_cache_dir() / "models" / "qwen3-tiny"
    if not (tokenizer_dir / "tokenizer.json").exists():
        pytest.fail(f"tiny Qwen3 tokenizer not fetched ({tokenizer_dir}); run `make assets`")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer), cache_enabled=False)
    compiled = compiler.compile_grammar(lark_to_ebnf(GRAMMARS["json"][0]))
    for text, ok in [('{"city": ["Zoë", 1.5e3]}', True), ('{"city" 1}', False)]:
        matcher = xgr.GrammarMatcher(compiled)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        accepted = all(matcher.accept_token(t) for t in tokens) and matcher.accept_token(tokenizer.eos_token_id)
        assert accepted == ok, text


def test_character_classes_are_exact_for_any_code_point_range(oracle: Oracle) -> None:
    """xgrammar 0.2.7 matches some multi-byte ranges wrongly unless they are cut at UTF-8
    boundaries (``grammars.lark.ebnf.utf8_pieces``), and negated classes with non-ASCII members
    too (so classes are always written positively)."""
    rng = random.Random(5)
    cases = [(0xF2A, 0x103F), (0x1EEBC, 0x1F0FF), (0x80, 0x10FFFF), (0x7FF, 0x800), (0xFFFF, 0x10000)]
    for _ in range(120):
        lo = rng.randint(0, 0x10FFFF)
        hi = min(0x10FFFF, lo + rng.choice([0, 1, 63, 64, 300, 5000, 70000, 0x10FFFF]))
        cases.append((lo, hi))
    for lo, hi in cases:
        for ranges in ([(lo, hi)], complement(((lo, hi),))):
            ranges = [r for r in ranges if not (0xD800 <= r[0] and r[1] <= 0xDFFF)]
            if not ranges:
                continue
            compiled = oracle.compile(f"root ::= {char_class(tuple(ranges))}")
            probes = {lo, hi, lo - 1, hi + 1, rng.randint(lo, hi), rng.randint(0, 0x10FFFF)}
            for code in (c for c in probes if 0 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF):
                inside = any(a <= code <= b for a, b in ranges)
                assert oracle.accepts(compiled, chr(code)) == inside, (hex(lo), hex(hi), hex(code))

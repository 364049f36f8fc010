"""Lark / choice / regex → xgrammar EBNF translation: outputs and refusals (pure, ms)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from grammars.errors import GrammarError, GrammarSyntaxError, UnsupportedGrammarError
from grammars.lark import choice_to_ebnf, is_probably_lark, lark_to_ebnf, regex_to_ebnf
from grammars.lark.ebnf import utf8_pieces
from grammars.lark.nodes import Alt, Chars, Repeat, Seq, Text
from grammars.lark.regex import parse_regex

ROOT = Path(__file__).resolve().parents[3]
# every character from U+007F on, cut where the UTF-8 encoding changes (no surrogates)
NOT_A_TAIL = (
    "\\u007f\\u0080-\\u07ff\\u0800-\\u0fff\\u1000-\\ucfff\\ud000-\\ud7ff\\ue000-\\uffff"
    "\\U00010000-\\U0003ffff\\U00040000-\\U000fffff\\U00100000-\\U0010ffff"
)


def rules(definition: str) -> dict[str, str]:
    """The translated EBNF as {rule name: body}."""
    lines = lark_to_ebnf(definition).splitlines()
    return dict(line.split(" ::= ", 1) for line in lines)


def test_error_codes_and_param() -> None:
    assert (UnsupportedGrammarError.code, GrammarSyntaxError.code) == (
        "unsupported_grammar_construct",
        "invalid_grammar",
    )
    err = UnsupportedGrammarError("m", construct="%declare", line=3)
    clone = err.with_param("tools.0.format.definition")
    assert isinstance(clone, GrammarError) and (clone.construct, clone.line, clone.param) == (
        "%declare",
        3,
        clone.param,
    )
    assert clone.param == "tools.0.format.definition" and err.param is None
    assert GrammarSyntaxError("m", line=2).with_param("x").line == 2


def test_is_probably_lark_is_vllms_rule() -> None:
    assert is_probably_lark('start: "a"') and is_probably_lark("")
    assert not is_probably_lark('root ::= "a"')


def test_choices_are_escaped() -> None:
    got = choice_to_ebnf(['say "hi"', "back\\slash", "a\nb\t\r", "é😀", "", "dup", "dup", "\x00\x7f"])
    expected = r'root ::= "say \"hi\"" | "back\\slash" | "a\u000ab\u0009\u000d" | "\u00e9\U0001f600" | "" | "dup"'
    assert got == expected + r' | "\u0000\u007f"' + "\n"


@pytest.mark.parametrize("bad", [[], (), "abc", ["a", 1], [None]])
def test_choices_must_be_a_non_empty_list_of_strings(bad: object) -> None:
    with pytest.raises(GrammarSyntaxError, match="choice"):
        choice_to_ebnf(bad)  # type: ignore[arg-type]


def test_choice_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(UnsupportedGrammarError, match="choice 1 holds a lone surrogate") as info:
        choice_to_ebnf(["a", "\ud800"])
    assert info.value.construct == "surrogate code point"


@pytest.mark.parametrize(
    "definition, rule, body",
    [
        ('start: "a" ~ 2..3', "r_start", '("a"){2,3}'),
        ('start: "a" ~ 3', "r_start", '("a"){3,3}'),
        ('start: "a" ~ 0', "r_start", '""'),
        ('start: "a"+ "b"* ["c"] "d"?', "r_start", '(("a")+ ("b")* ("c")? ("d")?)'),
        ('start: "a" ~ 2..3\n%ignore " "', "r_start", '("a" (ign "a"){1,2})'),
        ('start: "a"*\n%ignore " "', "r_start", '("a" (ign "a"){0,})?'),
        ('start: "a"+ "b"\n%ignore " "', "r_start", '(("a" (ign "a"){0,}) ign "b")'),
        ('start: ("a" "b")?\n%ignore " "', "r_start", '(("a" ign "b"))?'),
        ('start: "a" ~ 0..2\n%ignore " "', "r_start", '("a" (ign "a"){0,1})?'),
        ('start: A\nA: "a" ~ 2..3\n%ignore " "', "t_A", '("a"){2,3}'),  # nothing ignored inside terminals
        ('start: "a".."c" "\\n".."\\r"', "r_start", "([a-c] [\\u000a-\\u000d])"),
        ('start: "ab"i', "r_start", "([Aa] [Bb])"),
        ('start: "k"i "1"i', "r_start", '([Kk\\u212a] "1")'),
        ("start: /[^a]/", "r_start", "[\\u0000-`b-" + NOT_A_TAIL + "]"),  # positive, cut at UTF-8 lengths
        ('?start.2: "a" -> x\n    | "b"  // comment\n# comment\n  | "c"', "r_start", '("a" | "b" | "c")'),
        ('start: root\nroot: ign\nign: _x\n_x: "x"', "r_ign", "r__x"),
        ('start: "a"\nunused: "b"', "root", "r_start"),
    ],
)
def test_translation(definition: str, rule: str, body: str) -> None:
    got = rules(definition)
    assert got[rule] == body, got
    assert "r_unused" not in got


def test_ignore_runs_around_start_and_between_terminals() -> None:
    got = rules('start: "a" B\nB: "b"\n%ignore " "\n%ignore /#[^\\n]*\\n/')
    assert got["root"] == "ign r_start ign"
    assert got["ign"] == '(" " | ("#" ([\\u0000-\\u0009\\u000b-' + NOT_A_TAIL + '])* "\\u000a"))*'
    assert got["r_start"] == '("a" ign t_B)'


def test_imports_bring_private_copies_of_dependencies() -> None:
    got = rules('start: N DIGIT\nDIGIT: "x"\n%import common.INT -> N')
    assert got["t_N"] == "(t_DIGIT__common)+" and got["t_DIGIT"] == '"x"' and got["t_DIGIT__common"] == "[0-9]"


def test_regex_to_ebnf() -> None:
    assert regex_to_ebnf(r"a(?:bc|d)*\.") == 'root ::= ("a" (("bc" | "d"))* ".")\n'


@pytest.mark.parametrize(
    "pattern, node",
    [
        ("ab*", Seq((Text("a"), Repeat(Text("b"), 0, None)))),
        ("(?:ab){2,}", Repeat(Text("ab"), 2, None)),
        ("a{,3}|[b-d]", Alt((Repeat(Text("a"), 0, 3), Chars(((98, 100),))))),
        ("x{}y{1", Text("x{}y{1")),
        ("[]a-]", Chars(((45, 45), (93, 93), (97, 97)))),
        (r"[\b\n\x41\u00e9\N{EURO SIGN}]", Chars(((8, 8), (10, 10), (65, 65), (233, 233), (8364, 8364)))),
        ("(?P<n>a)", Text("a")),
    ],
)
def test_regex_trees(pattern: str, node: object) -> None:
    assert parse_regex(pattern, "", "test") == node


def test_utf8_pieces_cut_where_encodings_change() -> None:
    assert utf8_pieces(0x41, 0x41) == [(0x41, 0x41)]
    assert utf8_pieces(0x70, 0x800) == [(0x70, 0x7F), (0x80, 0x7FF), (0x800, 0x800)]
    assert utf8_pieces(0xF2A, 0x103F) == [(0xF2A, 0xF3F), (0xF40, 0xFFF), (0x1000, 0x103F)]


REFUSED = [
    ("start: A\n%declare A", "the directive %declare", 2),
    ('start: "a"\n%override start: "b"', "the directive %override", 2),
    ('start: "a"\n%extend start: "b"', "the directive %extend", 2),
    ('start: "a"\n%llguidance {}', "the directive %llguidance", 2),
    ('start: x\nx{p}: p "a"', "a template rule{...}", 2),
    ('start: sep{"a"}', "a template or llguidance's x{m,n}", 1),
    ("start: x\nx[lazy]: /a+/", "llguidance rule options name[...]", 2),
    ("start: %json {}", "`%json` inside a rule", 1),
    ("start: <|eot|>", "a special token <...> (llguidance)", 1),
    ("start: @sub", "a grammar reference @name (llguidance)", 1),
    ("start: A\n%import other.A", "%import other", 2),
    ("start: A\n%import .local.A", "a relative %import", 2),
    ('start: A\nA: "a" A?', "recursive terminal", 2),
    ('start: A\nA: B\nB: "x" A', "recursive terminal", 3),
    ("start: /(?=a)a/", "lookahead (?=...)", 1),
    ("start: /(?<!a)b/", "negative lookbehind (?<!...)", 1),
    (r"start: /(a)\1/", r"the escape \1", 1),
    ("start: /(?P<x>a)(?P=x)/", "backreference (?P=name)", 1),
    ("start: /a+?/", "a lazy quantifier", 1),
    ("start: /a++/", "a possessive quantifier", 1),
    ("start: /(?>a)/", "atomic group (?>...)", 1),
    ("start: /^a/", "the anchor `^`", 1),
    ("start: /a$/", "the anchor `$`", 1),
    (r"start: /a\b/", r"the escape \b", 1),
    ("start: /(?i)a/", "an inline flag group (?...)", 1),
    ("start: /(?s:.)/", "an inline flag group (?...)", 1),
    (r"start: /\p{L}/", r"a Unicode property class \p{...}", 1),
    ("start: /a/x", "regex flag x", 1),
    ("start: /é/i", "case-insensitive matching of a non-ASCII character", 1),
    ('start: "é"i', 'the `i` flag on "é"i', 1),
    ("start: /[^\\s\\S]/", "a character class that matches no character", 1),
    ("start: /a*/", "zero-width terminal", 1),
    ('start: "a" A\nA: "b"?', "zero-width terminal", 2),
    ("start: X\n%import common._STRING_INNER -> X", "common._STRING_INNER", 2),
    ("start: WORD WORD\n%import common.WORD", "overlapping terminals terminal WORD, terminal WORD", 2),
    ('start: "a" " b"\n%import common.WS\n%ignore WS', 'overlapping terminals %ignore #1, " b"', 3),
    ("start: WORD ~ 2..3\n%import common.WORD", "overlapping terminals", 2),
    ('start: A "b"\nA: /a( b)?/\n%ignore " "', "overlapping terminals terminal A, %ignore #1", 2),
    ('start: INT "." INT\n%import common.INT\n%import common.NUMBER -> INT2', None, None),  # allowed
    ("start: /(a|b)*a(a|b){20}/", "terminal too large", 1),  # a DFA of 2**21 states
    ('start: /.{1,5000}/ "\\n"', None, None),  # long counts are widened for the check: allowed
    ('start: /[a\\n]{1,5000}/ "\\n"', "overlapping terminals", 1),  # ... and still checked
]


@pytest.mark.parametrize("definition, construct, line", REFUSED)
def test_refused_constructs_name_themselves(definition: str, construct: str | None, line: int | None) -> None:
    if construct is None:
        lark_to_ebnf(definition)
        return
    with pytest.raises(UnsupportedGrammarError) as info:
        lark_to_ebnf(definition)
    err = info.value
    assert construct in err.construct and err.line == line, (err.construct, err.line, err.message)
    assert err.message.startswith(f"line {line}: ")
    assert "not supported" in err.message or "cannot be translated exactly" in err.message


INVALID = [
    ('rule: "a"', "no `start` rule", None),
    ("", "the grammar is empty", None),
    ("start: a", "undefined rule `a`", 1),
    ("start: A", "undefined terminal `A`", 1),
    ('start: "a"\nstart: "b"', "`start` is defined twice", 2),
    ('start: A\nA: "a"\n%import common.DIGIT -> A', "`A` is defined twice", 3),
    ('start: A\nA: "a" b\nb: "b"', "rule `b` used in terminal `A`", 2),
    ('start: "a"\n%ignore b\nb: "b"', "rule `b` used in %ignore", 2),
    ("start: /(a/", "missing ), unterminated subpattern", 1),
    ("start: /a)/", "unbalanced parenthesis", 1),
    ("start: /[a/", "unterminated character set", 1),
    ("start: /[z-a]/", "bad character range", 1),
    ("start: /*/", "nothing to repeat", 1),
    ("start: /a**/", "multiple repeat", 1),
    ("start: /a{3,2}/", "min repeat greater than max repeat", 1),
    (r"start: /\q/", r"bad escape \q", 1),
    ('start: "ab".."c"', "bad range", 1),
    ('start: "b".."a"', "bad range", 1),
    ('start: ""', "empty string literals", 1),
    ('start: "a" ~ 3..2', "bad repetition range", 1),
    ('start: ("a"', "expected )", 1),
    ('start: "a"\n\nFoo: "b"', "bad terminal name 'Foo'", 3),
    ('start: "a" $', "unexpected character '$'", 1),
    ("start: X\n%import common.NOPE -> X", "common has no terminal `NOPE`", 2),
    ("start: /a/q", "bad regex flags", 1),
]


@pytest.mark.parametrize("definition, what, line", INVALID)
def test_invalid_lark_is_a_syntax_error_with_its_line(definition: str, what: str, line: int | None) -> None:
    with pytest.raises(GrammarSyntaxError) as info:
        lark_to_ebnf(definition)
    assert what in info.value.message and info.value.line == line, (info.value.message, info.value.line)


@pytest.mark.parametrize(
    "definition",
    [
        "start: WORD+\n%import common (WORD, WS)\n%ignore WS",  # a run of WORDs reads as fewer WORDs
        'start: WORD ("," WORD)*\n%import common.WORD',
        'start: NUMBER ("," NUMBER)*\n%import common (NUMBER, WS)\n%ignore WS',
        "start: ESCAPED_STRING ESCAPED_STRING\n%import common.ESCAPED_STRING",  # prefix-free: no overlap
        'start: "if" | "iffy"',  # alternatives, not neighbours
        'start: ("<" | "<=") "x"',
        'start: stmt+\nstmt: "x"\n%ignore /[ \\t]+/\n%ignore /#[^\\n]*\\n/',
    ],
)
def test_terminals_that_lex_the_same_either_way_are_accepted(definition: str) -> None:
    assert lark_to_ebnf(definition).startswith("root ::= ")


@pytest.mark.parametrize(
    "rule",
    [
        'r{i}: r{j}? "k{i}"',  # a chain: first sets flow up, follow sets down
        'r{i}: (r{j} | "a{i}")* "k{i}"?',  # every rule nullable, first sets of every size
    ],
)
def test_large_grammars_translate_quickly(rule: str) -> None:
    """The flow analysis visits a rule again only when what it depends on grew (a plain
    fixpoint over all rules took 35-80 s here)."""
    definition = "start: r0\n" + "".join(rule.format(i=i, j=i + 1) + "\n" for i in range(800)) + 'r800: "end"\n'
    started = time.monotonic()
    lark_to_ebnf(definition)
    assert time.monotonic() - started < 10


def test_the_module_is_pure() -> None:
    code = "import grammars.lark.translate, sys; print(sorted({'xgrammar', 'torch', 'sglang', 'fastapi', 'lark'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""Python ``re`` patterns (the dialect Lark compiles ``/regex/`` with) → expression tree (pure).

Translated exactly: literals, escapes (``\\n \\t \\r \\f \\v \\a \\xHH \\uHHHH \\UHHHHHHHH
\\N{name}``, escaped punctuation), ``\\d \\w \\s \\D \\W \\S`` (Unicode-aware, as Python's ``re``
on str), ``.``, classes with ranges and negation, groups ``(...)``, ``(?:...)``,
``(?P<name>...)``, alternation, greedy ``* + ? {m} {m,} {,n} {m,n}``; flags ``i`` (ASCII
letters), ``s``, and the no-ops ``m`` (no anchors are allowed) and ``u``.

Refused (``UnsupportedGrammarError`` naming the construct): anchors and word boundaries,
lookarounds, backreferences and octal escapes, lazy and possessive quantifiers, atomic groups,
conditionals, inline flags, Unicode property classes, the ``x`` and ``l`` flags, and
case-insensitive matching of non-ASCII characters.
"""

from __future__ import annotations

import re
import unicodedata

from grammars.errors import GrammarSyntaxError, UnsupportedGrammarError
from grammars.lark.nodes import (
    ANY,
    Alt,
    Chars,
    Node,
    Ranges,
    Repeat,
    Seq,
    Text,
    complement,
    fold_ascii_case,
    normalize,
    unicode_class,
)

__all__ = ["parse_regex"]

_QUANTIFIER = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_HEX = {"x": 2, "u": 4, "U": 8}
_GROUPS = {
    "?=": "lookahead (?=...)",
    "?!": "negative lookahead (?!...)",
    "?<=": "lookbehind (?<=...)",
    "?<!": "negative lookbehind (?<!...)",
    "?P=": "backreference (?P=name)",
    "?#": "comment group (?#...)",
    "?>": "atomic group (?>...)",
    "?(": "conditional group (?(...)...)",
}
_FIX = "rewrite the regex without it, or express that part with grammar rules"


def parse_regex(pattern: str, flags: str, where: str, line: int | None = None) -> Node:
    """The tree of ``pattern`` (a Python ``re`` pattern) under Lark's ``flags``.

    ``where`` prefixes messages (e.g. ``"line 3: /a+/"``)."""
    for flag, why in (("x", "verbose mode"), ("l", "locale-dependent matching")):
        if flag in flags:
            raise UnsupportedGrammarError(
                f"{where}: the regex flag `{flag}` ({why}) is not supported; drop it",
                construct=f"regex flag {flag}",
                line=line,
            )
    return _Parser(pattern, flags, where, line).parse()


class _Parser:
    def __init__(self, pattern: str, flags: str, where: str, line: int | None) -> None:
        self.p, self.i, self.where, self.line = pattern, 0, where, line
        self.fold, self.dotall = "i" in flags, "s" in flags

    def unsupported(self, construct: str, fix: str = _FIX) -> UnsupportedGrammarError:
        return UnsupportedGrammarError(
            f"{self.where}: {construct} is not supported (no exact grammar equivalent); {fix}",
            construct=construct,
            line=self.line,
        )

    def invalid(self, what: str) -> GrammarSyntaxError:
        return GrammarSyntaxError(f"{self.where}: invalid regex: {what} at position {self.i}", line=self.line)

    def peek(self, n: int = 1) -> str:
        return self.p[self.i : self.i + n]

    def parse(self) -> Node:
        node = self.alternation()
        if self.i < len(self.p):
            raise self.invalid("unbalanced parenthesis")
        return node

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            node = self.quantified()
            if items and isinstance(node, Text) and isinstance(items[-1], Text):
                items[-1] = Text(items[-1].value + node.value)
            else:
                items.append(node)
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantified(self) -> Node:
        node = self.atom()
        bounds = self.quantifier()
        if bounds is None:
            return node
        if self.peek() == "?":
            raise self.unsupported("a lazy quantifier (*?, +?, ??, {m,n}?)", "use the greedy form")
        if self.peek() == "+":
            raise self.unsupported("a possessive quantifier (*+, ++, ?+)", "use the greedy form")
        if self.quantifier(probe=True) is not None:
            raise self.invalid("multiple repeat")
        return Repeat(node, *bounds)

    def quantifier(self, probe: bool = False) -> tuple[int, int | None] | None:
        char = self.peek()
        simple = {"*": (0, None), "+": (1, None), "?": (0, 1)}
        if char in simple and char:
            self.i += 0 if probe else 1
            return simple[char]
        match = _QUANTIFIER.match(self.p, self.i) if char == "{" else None
        if match is None or match.group(0) == "{}":
            return None
        lo, comma, hi = match.groups()
        low, high = int(lo or 0), (int(hi) if hi else None) if comma else int(lo)
        if high is not None and high < low:
            raise self.invalid("min repeat greater than max repeat")
        self.i = self.i if probe else match.end()
        return low, high

    def atom(self) -> Node:
        char = self.p[self.i]
        if char in "*+?" or (char == "{" and self.quantifier(probe=True) is not None):
            raise self.invalid("nothing to repeat")
        if char in "^$":
            raise self.unsupported(f"the anchor `{char}`", "remove it: a terminal always matches whole")
        self.i += 1
        if char == "(":
            return self.group()
        if char == "[":
            return self.node(self.char_class())
        if char == ".":
            return Chars(ANY if self.dotall else complement(((10, 10),)))
        got = self.escape(in_class=False) if char == "\\" else ord(char)
        return self.node(self.literal(got, got) if isinstance(got, int) else got)

    def group(self) -> Node:
        if self.peek() == "?":
            for prefix, construct in _GROUPS.items():
                if self.p.startswith(prefix, self.i):
                    raise self.unsupported(construct)
            named = re.compile(r"\?P<\w+>").match(self.p, self.i)
            if self.peek(2) == "?:" or named:
                self.i = named.end() if named else self.i + 2
            else:
                raise self.unsupported("an inline flag group (?...)", "use flags after the closing `/`")
        node = self.alternation()
        if self.peek() != ")":
            raise self.invalid("missing ), unterminated subpattern")
        self.i += 1
        return node

    def node(self, ranges: Ranges) -> Node:
        if not ranges:
            raise self.unsupported("a character class that matches no character", "remove it")
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return Text(chr(ranges[0][0]))
        return Chars(ranges)

    def literal(self, lo: int, hi: int) -> Ranges:
        """The characters ``lo``..``hi`` written literally, case-folded under ``i``."""
        ranges = normalize(((lo, hi),))
        if not ranges:
            raise self.unsupported("a surrogate code point (U+D800..U+DFFF)", "remove it: it cannot be output")
        if self.fold:
            folded = fold_ascii_case(ranges)
            if folded is None:
                raise self.unsupported(
                    "case-insensitive matching of a non-ASCII character", "list its cases in a class, e.g. [éÉ]"
                )
            ranges = folded
        return ranges

    def escape(self, in_class: bool) -> int | Ranges:
        """A code point, or the set of a class escape (\\d \\w \\s and complements: their
        sets are closed under Python's case folding, so ``i`` leaves them as they are)."""
        if self.i >= len(self.p):
            raise self.invalid("bad escape (end of pattern)")
        char = self.p[self.i]
        self.i += 1
        if char in "dDwWsS":
            return unicode_class(char)
        if char == "b" and in_class:
            return 8
        code = self.code_point_escape(char)
        if code is not None:
            return code
        if char in "pP":
            raise self.unsupported(f"a Unicode property class \\{char}{{...}}", "list the characters in a class")
        if char in "AZbBG" or char.isdigit():
            raise self.unsupported(f"the escape \\{char} (an anchor, word boundary, backreference or octal escape)")
        if char.isascii() and char.isalnum():
            raise self.invalid(f"bad escape \\{char}")
        return ord(char)

    def code_point_escape(self, char: str) -> int | None:
        if char in _SIMPLE:
            return ord(_SIMPLE[char])
        if char in _HEX:
            digits = self.peek(_HEX[char])
            if len(digits) != _HEX[char] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.invalid(f"incomplete escape \\{char}{digits}")
            self.i += len(digits)
            return int(digits, 16)
        if char == "N":
            match = re.compile(r"\{([^}]*)\}").match(self.p, self.i)
            try:
                code = ord(unicodedata.lookup(match.group(1))) if match else None
            except KeyError:
                code = None
            if match is None or code is None:
                raise self.invalid("bad character name in \\N{...}")
            self.i = match.end()
            return code
        return None

    def char_class(self) -> Ranges:
        negate = self.peek() == "^"
        self.i += negate
        parts: list[Ranges] = []
        first = True
        while first or self.peek() != "]":
            first = False
            lo = self.class_item()
            if self.peek() != "-" or self.peek(2) == "-]":
                parts.append(self.literal(lo, lo) if isinstance(lo, int) else lo)
                continue
            self.i += 1
            hi = self.class_item()
            if not isinstance(lo, int) or not isinstance(hi, int) or hi < lo:
                raise self.invalid("bad character range")
            parts.append(self.literal(lo, hi))
        self.i += 1
        ranges = normalize(r for part in parts for r in part)
        return complement(ranges) if negate else ranges

    def class_item(self) -> int | Ranges:
        if self.i >= len(self.p):
            raise self.invalid("unterminated character set")
        char = self.p[self.i]
        self.i += 1
        return self.escape(in_class=True) if char == "\\" else ord(char)

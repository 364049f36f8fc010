"""The expression tree shared by the Lark and regex parsers, and character sets (pure).

A character set is a tuple of sorted, disjoint, non-adjacent inclusive code point ranges.
Surrogates (U+D800..U+DFFF) are never members: they cannot be written as UTF-8, so no model
output contains them (and xgrammar would otherwise admit invalid byte sequences for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Union

__all__ = [
    "ANY",
    "EMPTY",
    "Alt",
    "Chars",
    "Name",
    "Node",
    "Ranges",
    "Repeat",
    "Seq",
    "Text",
    "Token",
    "complement",
    "fold_ascii_case",
    "intersect",
    "normalize",
    "unicode_class",
]

Ranges = tuple[tuple[int, int], ...]
MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
ANY: Ranges = ((0, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, MAX_CODE_POINT))


@dataclass(frozen=True)
class Chars:
    """One character out of ``ranges`` (never empty)."""

    ranges: Ranges


@dataclass(frozen=True)
class Text:
    """A literal string (never empty, no surrogates)."""

    value: str


@dataclass(frozen=True)
class Seq:
    """The items one after the other; ``Seq(())`` is the empty string."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    """One of the items (at least two)."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated ``low`` to ``high`` times (``high`` None: unbounded)."""

    item: Node
    low: int
    high: int | None


@dataclass(frozen=True)
class Name:
    """A reference to a rule (lowercase) or a terminal (uppercase) of the Lark grammar."""

    name: str
    line: int

    @property
    def is_terminal(self) -> bool:
        return self.name.lstrip("_")[:1].isupper()


@dataclass(frozen=True)
class Token:
    """An anonymous terminal written inside a rule: a string, a regex or a range."""

    body: Node
    label: str
    line: int


Node = Union[Chars, Text, Seq, Alt, Repeat, Name, Token]
EMPTY = Seq(())


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged ranges without surrogates."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return intersect(tuple((lo, hi) for lo, hi in merged), ANY)


def intersect(a: Ranges, b: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def complement(ranges: Ranges) -> Ranges:
    """Every scalar value (no surrogates) outside ``ranges``."""
    out: list[tuple[int, int]] = []
    start = 0
    for lo, hi in normalize(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return intersect(tuple(out), ANY)


def _scan(predicate: Callable[[str], bool]) -> Ranges:
    out: list[tuple[int, int]] = []
    for code in range(MAX_CODE_POINT + 1):
        if predicate(chr(code)):
            if out and out[-1][1] == code - 1:
                out[-1] = (out[-1][0], code)
            else:
                out.append((code, code))
    return normalize(out)


@cache
def unicode_class(letter: str) -> Ranges:
    """Python ``re``'s ``\\d``, ``\\s``, ``\\w`` on str patterns (Unicode-aware, as Lark uses
    them): ``str.isdecimal``, ``str.isspace``, ``str.isalnum`` or ``_``; the uppercase
    letters are the complements."""
    base = {
        "d": lambda c: c.isdecimal(),
        "s": lambda c: c.isspace(),
        "w": lambda c: c.isalnum() or c == "_",
    }[letter.lower()]
    ranges = _scan(base)
    return complement(ranges) if letter.isupper() else ranges


# Python re's IGNORECASE classes of the ASCII letters (besides the two ASCII cases).
_FOLD_EXTRA = {"i": (0x130, 0x131), "k": (0x212A,), "s": (0x17F,)}


def fold_ascii_case(ranges: Ranges) -> Ranges | None:
    """The characters Python ``re`` matches against ``ranges`` under the ``i`` flag, or None
    when ``ranges`` holds a non-ASCII character (not translated: refuse)."""
    if ranges and ranges[-1][1] > 0x7F:
        return None
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        for code in range(lo, hi + 1):
            char = chr(code)
            if char.isalpha():
                for other in {char.lower(), char.upper()}:
                    extra.append((ord(other), ord(other)))
                extra.extend((c, c) for c in _FOLD_EXTRA.get(char.lower(), ()))
    return normalize((*ranges, *extra))

"""Client ``pattern``s matched in linear time: ECMA-262 regexes (what JSON Schema specifies) run
on RE2, never on Python's backtracking ``re``.

A schema's ``pattern`` and ``patternProperties`` are matched in the service process (the policy's
checks, the post-validation of outputs). Python's ``re`` backtracks: ``(a+)+$`` against
``"aaaa…ab"`` takes minutes and, holding the GIL, stalls every request. RE2 (``google-re2``)
matches in time linear in the text, and bounds each compiled program (``MAX_MEM``).

``compile_pattern`` translates the ECMA-262 forms RE2 reads differently, then compiles:
- ``\\uXXXX`` and ``\\u{X…}`` become ``\\x{…}``; ``\\cX`` its control character; ``\\0`` NUL;
  ``[\\b]`` backspace;
- ``\\s`` / ``\\S`` (outside a class) and ``.`` get ECMA's sets: ``\\s`` includes ``\\v`` and the
  Unicode spaces, ``.`` excludes ``\\r``, U+2028 and U+2029 as well as ``\\n``;
- ``\\p{Letter}``, ``\\p{General_Category=Nd}``, ``\\p{Script=Greek}``: RE2's short names;
- ``\\d``, ``\\w``, ``\\b`` are ASCII in both; ``$`` matches only at the very end in both.
What RE2 cannot run in linear time — backreferences (``\\1``, ``\\k<n>``), lookahead and
lookbehind, ``[]`` / ``[^]``, counted repetitions above 1000, programs above ``MAX_MEM`` —
raises ``PatternError``: the policy refuses such a pattern at request time
(``UncheckablePatternError``, a 400 naming it), so it is never matched. A text that is no regex
at all (``PatternError.syntax``) is left to the grammar compiler, which names its syntax error.
"""

from __future__ import annotations

from typing import Any

from grammars.bounded_cache import BoundedCache, text_bytes
from grammars.errors import UncheckablePatternError
from grammars.json_schema.canonical import iter_subschemas

__all__ = ["MAX_MEM", "PatternError", "check_patterns", "compile_pattern", "search", "to_re2"]

MAX_MEM = 1 << 20
"""RE2's memory budget per compiled pattern (program and DFA cache); a larger program is a
``PatternError`` (``pattern too large``)."""
_CACHE: BoundedCache[str, Any] = BoundedCache(
    256, 32 * MAX_MEM, lambda key, value: text_bytes(key) + (64 if isinstance(value, PatternError) else MAX_MEM)
)
"""Compiled patterns (and refusals): each compiled one charged its text and its whole RE2
budget, so at most 32 live."""
_SPACE = r"\t\n\x{0B}\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}"
_DOT = r"[^\n\r\x{2028}\x{2029}]"
_SYNTAX_ERRORS = (
    "missing )",
    "missing ]",
    "unexpected )",
    "trailing \\",
    "no argument for repetition operator",
    "bad repetition operator",
    "invalid character class range",
)
"""RE2's errors for a text that is no regex in ECMA-262 either (its other errors name constructs
RE2 does not run)."""
_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
_CATEGORIES = {
    "Letter": "L", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll", "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M", "Number": "N", "Decimal_Number": "Nd",
    "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No", "Punctuation": "P", "Symbol": "S",
    "Separator": "Z", "Space_Separator": "Zs", "Other": "C", "Control": "Cc",
}  # fmt: skip
"""ECMA-262's long General_Category names, as RE2 spells them (scripts are spelled alike)."""
_HEX = frozenset("0123456789abcdefABCDEF")


class PatternError(ValueError):
    """A pattern RE2 cannot run: a construct outside linear-time matching, too large, or
    (``syntax``) no regex at all."""

    def __init__(self, message: str, *, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax


def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 regex for the ECMA-262 ``pattern`` (cached); ``PatternError`` when
    RE2 cannot run it."""
    hit, compiled = _CACHE.lookup(pattern)
    if hit:
        if isinstance(compiled, PatternError):
            raise compiled
        return compiled
    import re2

    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEM
    try:
        compiled = re2._Regexp(to_re2(pattern), options)  # not re2.compile: its own cache is unbounded in bytes
    except (re2.error, PatternError) as exc:
        error = exc if isinstance(exc, PatternError) else _error(exc)
        _CACHE.put(pattern, error)
        raise error from None
    _CACHE.put(pattern, compiled)
    return compiled


def check_patterns(schema: Any) -> None:
    """``UncheckablePatternError`` at the first ``pattern`` / ``patternProperties`` regex of
    ``schema`` that RE2 cannot run."""
    for node in iter_subschemas(schema):
        if not isinstance(node.value, dict):
            continue
        found = [("pattern", node.value.get("pattern"))]
        found += [("patternProperties", key) for key in node.value.get("patternProperties") or {}]
        for keyword, pattern in found:
            if not isinstance(pattern, str):
                continue
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                if exc.syntax:
                    continue  # no regex in any dialect: the grammar compiler names the error (GrammarCompileError)
                raise UncheckablePatternError(
                    f"the {keyword} regex {pattern[:200]!r} at {node.pointer or '/'} cannot be matched by the "
                    f"server's linear-time regex engine (RE2): {exc}",
                    pointer=node.pointer,
                    keyword=keyword,
                ) from None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (JSON Schema's semantics)."""
    return compile_pattern(pattern).search(text) is not None


def _error(exc: Exception) -> PatternError:
    detail = exc.args[0] if exc.args else ""
    text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
    return PatternError(f"RE2 cannot compile it ({text})", syntax=text.startswith(_SYNTAX_ERRORS))


def to_re2(pattern: str) -> str:
    """``pattern`` (ECMA-262) in RE2's syntax, same meaning (module docstring)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            text, width = _escape(pattern, i + 1, in_class)
            out.append(text)
            i += width
            continue
        if in_class:
            in_class = char != "]"
        elif pattern.startswith(_LOOKAROUNDS, i):
            raise PatternError("lookahead and lookbehind assertions cannot be matched in linear time; rewrite without")
        elif char == "[":
            start = i + 1 + pattern.startswith("^", i + 1)
            if pattern.startswith("]", start):
                raise PatternError("`[]` and `[^]` mean different things in ECMA-262 and RE2; write the class out")
            in_class = True
        elif char == ".":
            char = _DOT
        out.append(char)
        i += 1
    return "".join(out)


def _escape(pattern: str, at: int, in_class: bool) -> tuple[str, int]:
    """RE2 text for the escape whose letter is at ``pattern[at]``, and the escape's width."""
    letter = pattern[at]
    if letter == "u":
        if pattern.startswith("{", at + 1) and "}" in pattern[at:]:
            end = pattern.index("}", at)
            return f"\\x{{{pattern[at + 2 : end]}}}", end - at + 2
        digits = pattern[at + 1 : at + 5]
        if len(digits) == 4 and set(digits) <= _HEX:
            return f"\\x{{{digits}}}", 6
    if letter == "c" and pattern[at + 1 : at + 2].isascii() and pattern[at + 1 : at + 2].isalpha():
        return f"\\x{{{ord(pattern[at + 1]) % 32:02X}}}", 3
    if letter in "123456789k" and not in_class:
        raise PatternError("backreferences cannot be matched in linear time; rewrite without")
    if letter == "0" and not pattern[at + 1 : at + 2].isdigit():
        return "\\x{00}", 2
    if letter == "b" and in_class:
        return "\\x{08}", 2
    if letter in "pP" and pattern.startswith("{", at + 1) and "}" in pattern[at:]:
        end = pattern.index("}", at)
        name = pattern[at + 2 : end].split("=", 1)[-1]  # General_Category=, gc=, Script=, sc=
        return f"\\{letter}{{{_CATEGORIES.get(name, name)}}}", end - at + 2
    if letter == "s":
        return (_SPACE if in_class else f"[{_SPACE}]"), 2
    if letter == "S" and not in_class:
        return f"[^{_SPACE}]", 2
    return pattern[at - 1 : at + 1], 2

"""Lark literals → expression trees (pure): strings (with Lark's escaping and the ``i`` flag),
ranges ``"a".."z"`` and ``/regex/flags``; and the error helpers of the Lark reader."""

from __future__ import annotations

import ast
import warnings

from grammars.errors import GrammarSyntaxError, UnsupportedGrammarError
from grammars.lark.nodes import Chars, Node, Seq, Text, fold_ascii_case, normalize
from grammars.lark.regex import parse_regex

__all__ = ["lark_unescape", "range_node", "regex_node", "string_node", "syntax_error", "unsupported"]


def syntax_error(line: int, what: str) -> GrammarSyntaxError:
    return GrammarSyntaxError(f"line {line}: not valid Lark: {what}", line=line)


def unsupported(line: int, construct: str, detail: str) -> UnsupportedGrammarError:
    """``detail`` says why and what to change."""
    message = f"line {line}: {construct} is not supported: {detail}"
    return UnsupportedGrammarError(message, construct=construct, line=line)


def lark_unescape(body: str, is_string: bool, line: int) -> str:
    """Lark's ``eval_escaping`` of a literal's body (then, for strings, ``\\\\`` → ``\\``)."""
    out, chars = "", iter(body)
    for char in chars:
        out += char
        if char == "\\":
            nxt = next(chars, None)
            if nxt is None:
                raise syntax_error(line, f"literal ended unexpectedly (bad escaping): {body!r}")
            out += "\\\\" if nxt == "\\" else ("\\" if nxt not in "Uuxnftr" else "")
            out += nxt
    out = out.replace('\\"', '"').replace("'", "\\'")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = ast.literal_eval(f"u'''{out}'''")
    except (SyntaxError, ValueError) as exc:
        raise syntax_error(line, f"bad escaping in literal {body!r}: {exc}") from None
    assert isinstance(value, str)
    return value.replace("\\\\", "\\") if is_string else value


def regex_node(text: str, line: int) -> Node:
    """``/body/flags`` as written in the grammar."""
    end = text.rindex("/")
    flags, body = text[end + 1 :], text[1:end]
    if set(flags) - set("imslux") or ("\n" in body and "x" not in flags):
        raise syntax_error(line, f"bad regex flags or a newline in {text!r}")
    return parse_regex(lark_unescape(body, False, line), flags, f"line {line}: {text}", line)


def range_node(first: str, last: str, line: int) -> Node:
    """``first..last`` (two string tokens as written)."""
    start = lark_unescape(first[1:-1], True, line)
    end = lark_unescape(last[1:-1], True, line)
    if first.endswith("i") or last.endswith("i") or len(start) != 1 or len(end) != 1 or end < start:
        raise syntax_error(line, f"bad range {first}..{last}")
    ranges = normalize(((ord(start), ord(end)),))
    if not ranges:
        raise unsupported(line, "a range of surrogates", "they cannot be output; remove it")
    return Chars(ranges)


def string_node(text: str, line: int) -> Node:
    """``"..."`` or ``"..."i`` as written."""
    fold = text.endswith("i")
    value = lark_unescape(text[1 : -2 if fold else -1], True, line)
    if not value:
        raise syntax_error(line, "empty string literals are not allowed")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise unsupported(line, f"a surrogate code point in {text}", "it cannot be output; remove it")
    if not fold:
        return Text(value)
    parts: list[Node] = []
    for char in value:
        ranges = fold_ascii_case(((ord(char), ord(char)),))
        if ranges is None:
            detail = 'only ASCII letters are case-folded; write its cases out, e.g. ("é" | "É")'
            raise unsupported(line, f"the `i` flag on {text}", detail)
        parts.append(Text(char) if len(ranges) == 1 else Chars(ranges))
    return parts[0] if len(parts) == 1 else Seq(tuple(parts))

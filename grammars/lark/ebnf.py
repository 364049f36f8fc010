"""Expression trees → xgrammar EBNF text (pure).

Names: Lark rule ``x`` becomes ``r_x``, terminal ``X`` becomes ``t_X``; ``root`` and ``ign`` (the
``%ignore`` run) cannot collide with them. Character classes are always written positively
(complements expanded into ranges): xgrammar 0.2.7 mis-handles negated classes holding
non-ASCII characters (``[^é]`` admits ``é``).
"""

from __future__ import annotations

from collections.abc import Iterable

from grammars.lark.nodes import Alt, Chars, Name, Node, Ranges, Repeat, Seq, Text
from grammars.lark.syntax import LarkGrammar

__all__ = ["IGNORE_RULE", "emit_grammar", "literal", "node_ebnf", "reachable", "rule_name", "utf8_pieces"]

IGNORE_RULE = "ign"
_CLASS_SPECIAL = set("\\]-^[")


def rule_name(name: str) -> str:
    return ("t_" if name.lstrip("_")[:1].isupper() else "r_") + name


def _char(code: int, special: Iterable[str]) -> str:
    char = chr(code)
    if char in special:
        return "\\" + char
    if 0x20 <= code < 0x7F:
        return char
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def literal(text: str) -> str:
    """``text`` as an xgrammar string literal (``""`` for the empty string)."""
    return '"' + "".join(_char(ord(c), '"\\') for c in text) + '"'


def utf8_pieces(lo: int, hi: int) -> list[tuple[int, int]]:
    """``lo..hi`` cut where its UTF-8 encodings change length or stop varying as a rectangle
    of byte ranges (each piece: fixed leading bytes, then full ranges), as regex engines split
    them. xgrammar 0.2.7 matches some uncut multi-byte ranges wrongly (``[\\u0f2a-\\u103f]``
    refuses ``\\u1002``, ``[\\U0001eebc-\\U0001f0ff]`` refuses ``\\U0001f000``); cut, it is exact."""
    pieces, todo = [], [(lo, hi)]
    while todo:
        lo, hi = todo.pop()
        cut = next((limit for limit in (0x7F, 0x7FF, 0xFFFF) if lo <= limit < hi), None)
        if cut is None:
            cut = _rectangle_cut(lo, hi)
        if cut is None:
            pieces.append((lo, hi))
        else:
            todo += [(cut + 1, hi), (lo, cut)]
    return sorted(pieces)


def _rectangle_cut(lo: int, hi: int) -> int | None:
    """Where to cut ``lo..hi`` (one UTF-8 length) so its continuation bytes vary fully, or None."""
    length = 1 if hi <= 0x7F else 2 if hi <= 0x7FF else 3 if hi <= 0xFFFF else 4
    for bits in range(6, 6 * length, 6):
        mask = (1 << bits) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                return lo | mask
            if hi & mask != mask:
                return (hi & ~mask) - 1
    return None


def char_class(ranges: Ranges) -> str:
    parts = []
    for lo, hi in (piece for lo, hi in ranges for piece in utf8_pieces(lo, hi)):
        parts.append(_char(lo, _CLASS_SPECIAL) + ("" if lo == hi else "-" + _char(hi, _CLASS_SPECIAL)))
    return "[" + "".join(parts) + "]"


def _repeat(item: str, low: int, high: int | None, ign: bool) -> str:
    if high == 0:
        return '""'
    if not ign or high == 1:
        suffix = {(0, None): "*", (1, None): "+", (0, 1): "?", (1, 1): ""}.get((low, high))
        if suffix is None:
            suffix = f"{{{low},{'' if high is None else high}}}"
        return f"({item}){suffix}"
    # the ignored run goes between repetitions, never before the first or after the last
    rest_high = "" if high is None else str(high - 1)
    rest = f"({IGNORE_RULE} {item}){{{max(low - 1, 0)},{rest_high}}}"
    return f"({item} {rest})" + ("?" if low == 0 else "")


def node_ebnf(node: Node, ign: bool = False) -> str:
    """``node`` as an EBNF expression; ``ign``: put the ignored run between its items (rules)."""
    if isinstance(node, Text):
        return literal(node.value)
    if isinstance(node, Chars):
        return char_class(node.ranges)
    if isinstance(node, Seq):
        if not node.items:
            return '""'
        joiner = f" {IGNORE_RULE} " if ign else " "
        return "(" + joiner.join(node_ebnf(item, ign) for item in node.items) + ")"
    if isinstance(node, Alt):
        return "(" + " | ".join(node_ebnf(item, ign) for item in node.items) + ")"
    if isinstance(node, Repeat):
        return _repeat(node_ebnf(node.item, ign), node.low, node.high, ign)
    if isinstance(node, Name):
        return rule_name(node.name)
    return node_ebnf(node.body)  # an anonymous terminal: nothing ignored inside it


def _refs(node: Node) -> Iterable[str]:
    if isinstance(node, Name):
        yield node.name
    elif isinstance(node, (Seq, Alt)):
        for item in node.items:
            yield from _refs(item)
    elif isinstance(node, Repeat):
        yield from _refs(node.item)


def reachable(grammar: LarkGrammar) -> list[str]:
    """The rules and terminals used from ``start`` and ``%ignore``, in order of first use."""
    order = ["start"]
    todo = ["start"] + [ref for d in grammar.ignore for ref in _refs(d.body)]
    seen = set(todo)
    order += todo[1:]
    while todo:
        name = todo.pop(0)
        table = grammar.terminals if name.lstrip("_")[:1].isupper() else grammar.rules
        for ref in _refs(table[name].body):
            if ref not in seen:
                seen.add(ref)
                order.append(ref)
                todo.append(ref)
    return order


def emit_grammar(grammar: LarkGrammar, names: list[str]) -> str:
    """The EBNF of ``grammar`` restricted to ``names`` (from ``reachable``)."""
    ign = bool(grammar.ignore)
    root = f"{IGNORE_RULE} r_start {IGNORE_RULE}" if ign else "r_start"
    lines = [f"root ::= {root}"]
    if ign:
        run = " | ".join(node_ebnf(d.body) for d in grammar.ignore)
        lines.append(f"{IGNORE_RULE} ::= ({run})*")
    for name in names:
        terminal = name.lstrip("_")[:1].isupper()
        definition = (grammar.terminals if terminal else grammar.rules)[name]
        lines.append(f"{rule_name(name)} ::= {node_ebnf(definition.body, ign and not terminal)}")
    return "\n".join(lines) + "\n"

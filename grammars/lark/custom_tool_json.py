"""A custom tool's input inside a JSON tool-call frame: ``{"input": "<the input, JSON-escaped>"}``
(pure: no xgrammar, torch, sglang or fastapi).

A model's tool-call syntax carries arguments as a JSON object. A custom tool is shown to the
model as a function with one string parameter ``input``; its grammar G is over the *decoded*
input. This module builds the EBNF of the argument object whose ``input`` string decodes to a
word of G: every character the grammar can produce is written as JSON writes it inside a
string (``"`` → ``\\"``, ``\\`` → ``\\\\``, control characters → ``\\n``, ``\\t``, … or ``\\u00XX``;
everything else as itself). One encoding per character: a decoded input is always in G (never
looser), and every word of G has its encoding (nothing lost).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Literal

from grammars.lark.common import resolve
from grammars.lark.ebnf import emit_grammar, literal, node_ebnf, reachable
from grammars.lark.lexing import check_lexing
from grammars.lark.nodes import ANY, Alt, Chars, Name, Node, Repeat, Seq, Text, Token, complement, intersect, normalize
from grammars.lark.regex import parse_regex
from grammars.lark.syntax import LarkGrammar, parse_lark

__all__ = ["ARGUMENTS_PREFIX", "ARGUMENTS_SUFFIX", "custom_arguments_ebnf", "json_escaped"]

ARGUMENTS_PREFIX = '{"input": "'
ARGUMENTS_SUFFIX = '"}'
INPUT_RULE = "custom_input"
_SPECIAL = normalize([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_PLAIN = complement(_SPECIAL)
_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def _escape(code: int) -> str:
    return _SHORT.get(code, f"\\u{code:04x}")


def _text(value: str) -> Node:
    pieces = [_escape(ord(c)) if intersect(((ord(c), ord(c)),), _SPECIAL) else c for c in value]
    return Text("".join(pieces))


def _chars(node: Chars) -> Node:
    plain, special = intersect(node.ranges, _PLAIN), intersect(node.ranges, _SPECIAL)
    items: list[Node] = [Chars(plain)] if plain else []
    items += [Text(_escape(code)) for lo, hi in special for code in range(lo, hi + 1)]
    return items[0] if len(items) == 1 else Alt(tuple(items))


def json_escaped(node: Node) -> Node:
    """``node`` with every character it produces written as inside a JSON string."""
    if isinstance(node, Text):
        return _text(node.value)
    if isinstance(node, Chars):
        return _chars(node)
    if isinstance(node, (Seq, Alt)):
        return type(node)(tuple(json_escaped(item) for item in node.items))
    if isinstance(node, Repeat):
        return replace(node, item=json_escaped(node.item))
    if isinstance(node, Token):
        return replace(node, body=json_escaped(node.body))
    if isinstance(node, Name):
        return node  # its rule is escaped where it is defined
    raise TypeError(f"unknown node {node!r}")


def _escaped_grammar(grammar: LarkGrammar) -> LarkGrammar:
    def each(table: dict) -> dict:  # type: ignore[type-arg]
        return {name: replace(d, body=json_escaped(d.body)) for name, d in table.items()}

    return replace(
        grammar,
        rules=each(grammar.rules),
        terminals=each(grammar.terminals),
        ignore=[replace(d, body=json_escaped(d.body)) for d in grammar.ignore],
    )


def _framed(input_ebnf: str) -> str:
    """``input_ebnf`` (root rule ``root``) as the ``input`` string of the argument object."""
    body = input_ebnf.replace("root ::= ", f"{INPUT_RULE} ::= ", 1)
    return f"root ::= {literal(ARGUMENTS_PREFIX)} {INPUT_RULE} {literal(ARGUMENTS_SUFFIX)}\n{body}"


def custom_arguments_ebnf(syntax: Literal["lark", "regex"] | None, definition: str = "") -> str:
    """The EBNF of ``{"input": "…"}`` whose decoded input is in the grammar (``syntax`` None:
    any text). Raises the grammar layer's errors as ``lark_to_ebnf`` does."""
    if syntax is None:
        return _framed(f"root ::= {node_ebnf(json_escaped(Repeat(Chars(ANY), 0, None)))}\n")
    if syntax == "regex":
        node = parse_regex(definition, "", f"regex {definition!r}")
        return _framed(f"root ::= {node_ebnf(json_escaped(node))}\n")
    grammar = resolve(parse_lark(definition))
    names = reachable(grammar)
    check_lexing(grammar, [name for name in names if not name.lstrip("_")[:1].isupper()])
    return _framed(emit_grammar(_escaped_grammar(grammar), names))


_OPENING = re.compile(r'\{\s*"input"\s*:\s*"')


class InputStream:
    """Streams the decoded ``input`` of a custom call from the argument fragments the tool-call
    parser yields (as the model wrote them, or re-serialized compactly): ``feed`` returns the
    newly decoded text; an escape split between fragments is held back until it is complete."""

    def __init__(self) -> None:
        self._raw = ""
        self._done = 0  # raw characters decoded so far (after the opening)

    def feed(self, fragment: str) -> str:
        self._raw += fragment
        opening = _OPENING.match(self._raw)
        body = self._raw[opening.end() :] if opening else ""
        out, i = [], self._done
        while i < len(body) and body[i] != '"':
            if body[i] != "\\":
                out.append(body[i])
                i += 1
                continue
            size = 6 if body[i + 1 : i + 2] == "u" else 2
            if i + size > len(body):
                break  # an escape split between fragments: wait for the rest
            out.append(json.loads(f'"{body[i : i + size]}"'))
            i += size
        self._done = i
        return "".join(out)

"""``%import common`` and the checks on names of a parsed Lark grammar (pure).

The terminals are lark's ``grammars/common.lark`` (lark 1.x), translated by this package's own
parser. Two of them are rewritten without lazy quantifiers and lookbehinds, to the same
language (each ends at its first possible end, which is exactly how Lark's lazy regex stops):

- ``ESCAPED_STRING``: Lark's ``"\\"" /.*?/ /(?<!\\\\)(\\\\\\\\)*?/ "\\""`` ends at the first
  quote not escaped by an odd run of backslashes, on one line: a quote, then characters other
  than quote, backslash and newline or a backslash with any character but newline, then a quote.
- ``C_COMMENT``: Lark's ``"/*" /(.|\\n)*?/ "*/"`` ends at the first ``*/``.

``_STRING_INNER`` and ``_STRING_ESC_INNER`` are refused: alone, their lazy regexes match the
empty string (Lark itself rejects them as zero-width terminals).
"""

from __future__ import annotations

from functools import cache

from grammars.errors import GrammarSyntaxError, UnsupportedGrammarError
from grammars.lark.nodes import Alt, Name, Node, Repeat, Seq
from grammars.lark.syntax import Definition, LarkGrammar, parse_lark

__all__ = ["COMMON_NAMESPACE", "resolve"]

COMMON_NAMESPACE = "__common"  # suffix of the private copies of imported terminals' dependencies

_COMMON = r"""
DIGIT: "0".."9"
HEXDIGIT: "a".."f"|"A".."F"|DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
ESCAPED_STRING: "\"" (/[^"\\\n]/ | /\\./)* "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR : /\r/
LF : /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: "/*" /([^*]|\*+[^*\/])*\*+/ "/"
SQL_COMMENT: /--[^\n]*/
"""
_LAZY = ("_STRING_INNER", "_STRING_ESC_INNER")


@cache
def _common() -> dict[str, Definition]:
    return parse_lark(_COMMON).terminals


def _rename(node: Node, names: dict[str, str]) -> Node:
    if isinstance(node, Name):
        return Name(names.get(node.name, node.name), node.line)
    if isinstance(node, (Seq, Alt)):
        return type(node)(tuple(_rename(item, names) for item in node.items))
    if isinstance(node, Repeat):
        return Repeat(_rename(node.item, names), node.low, node.high)
    return node


def _define(grammar: LarkGrammar, name: str, definition: Definition) -> None:
    if name in grammar.terminals or name in grammar.rules:
        raise GrammarSyntaxError(f"line {definition.line}: `{name}` is defined twice", line=definition.line)
    grammar.terminals[name] = definition


def _import(grammar: LarkGrammar, name: str, alias: str, line: int) -> None:
    common = _common()
    if name in _LAZY:
        detail = "its lazy regex alone matches the empty string (Lark rejects it too); import ESCAPED_STRING"
        message = f"line {line}: %import common.{name} is not supported: {detail}"
        raise UnsupportedGrammarError(message, construct=f"common.{name}", line=line)
    if name not in common:
        raise GrammarSyntaxError(f"line {line}: common has no terminal `{name}`", line=line)
    if not alias.lstrip("_")[:1].isupper():
        raise GrammarSyntaxError(f"line {line}: import `{name}` under a terminal (uppercase) name", line=line)
    todo = [(name, alias)]
    while todo:  # dependencies as private copies: the grammar's own names do not capture them
        current, local = todo.pop()
        if current != name and local in grammar.terminals:
            continue
        refs = {ref.name for ref in _names(common[current].body)}
        body = _rename(common[current].body, {ref: ref + COMMON_NAMESPACE for ref in refs})
        _define(grammar, local, Definition(local, body, line))
        todo.extend((ref, ref + COMMON_NAMESPACE) for ref in refs)


def _names(node: Node) -> list[Name]:
    if isinstance(node, Name):
        return [node]
    if isinstance(node, (Seq, Alt)):
        return [name for item in node.items for name in _names(item)]
    if isinstance(node, Repeat):
        return _names(node.item)
    return []


def _check_terminal_cycles(grammar: LarkGrammar) -> None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, line: int) -> None:
        if state.get(name) == 1:
            detail = "a terminal is one regular expression; use a rule (lowercase) for recursion"
            message = f"line {line}: recursion in terminal `{name}` is not supported: {detail}"
            raise UnsupportedGrammarError(message, construct="recursive terminal", line=line)
        if state.get(name) == 2:
            return
        state[name] = 1
        for ref in _names(grammar.terminals[name].body):
            visit(ref.name, ref.line)
        state[name] = 2

    for name, definition in grammar.terminals.items():
        visit(name, definition.line)


def _check_references(grammar: LarkGrammar) -> None:
    places = [(False, d, f"rule `{d.name}`") for d in grammar.rules.values()]
    places += [(True, d, f"terminal `{d.name}`") for d in grammar.terminals.values()]
    places += [(True, d, "%ignore") for d in grammar.ignore]
    for in_terminal, definition, where in places:
        for ref in _names(definition.body):
            if in_terminal and not ref.is_terminal:
                raise GrammarSyntaxError(f"line {ref.line}: rule `{ref.name}` used in {where}", line=ref.line)
            if ref.name not in (grammar.terminals if ref.is_terminal else grammar.rules):
                kind = "terminal" if ref.is_terminal else "rule"
                raise GrammarSyntaxError(f"line {ref.line}: undefined {kind} `{ref.name}`", line=ref.line)


def resolve(grammar: LarkGrammar) -> LarkGrammar:
    """``grammar`` with its imports defined, after checking every name and the start rule."""
    for name, alias, line in grammar.imports:
        _import(grammar, name, alias, line)
    if "start" not in grammar.rules:
        raise GrammarSyntaxError("not valid Lark: no `start` rule (the translation starts there); define `start: ...`")
    _check_references(grammar)
    _check_terminal_cycles(grammar)
    return grammar

"""Lark grammar text → definitions (pure): the tokenizer and the statement parser (literals:
``grammars.lark.literals``). Constructs outside the translated subset are refused where they
are read (``UnsupportedGrammarError``); text that is not Lark raises ``GrammarSyntaxError``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from grammars.lark.literals import range_node, regex_node, string_node, syntax_error, unsupported
from grammars.lark.nodes import Alt, Name, Node, Repeat, Seq, Token

__all__ = ["Definition", "LarkGrammar", "parse_lark"]

_TOKEN = re.compile(
    r"""(?P<blank>[ \t\f\r]+|\\[ \t]*\r?\n)|(?P<comment>(?://|\#)[^\n]*)|(?P<nl>\n)
    |(?P<string>"(?:\\"|\\\\|[^"\n])*?"i?)|(?P<regexp>/(?!/)(?:\\/|\\\\|[^/])*?/[a-z]*)
    |(?P<directive>%[A-Za-z_]+)|(?P<arrow>->)|(?P<dotdot>\.\.)|(?P<name>[_A-Za-z][_A-Za-z0-9]*)
    |(?P<number>[+-]?\d+)|(?P<punct>[.:|()\[\]{}+*?~,!<>@])""",
    re.X,
)
_RULE = re.compile(r"_?[a-z][_a-z0-9]*")
_TERMINAL = re.compile(r"_?[A-Z][_A-Z0-9]*")
_ONLY_COMMON = "only `%import common` is available; define the terminals in the grammar"
_REFUSED_DIRECTIVES = {
    "%declare": "declares a terminal without a definition (for a custom lexer)",
    "%override": "changes an imported definition",
    "%extend": "changes an imported definition",
}


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int


@dataclass(frozen=True)
class Definition:
    name: str
    body: Node
    line: int


@dataclass
class LarkGrammar:
    rules: dict[str, Definition] = field(default_factory=dict)
    terminals: dict[str, Definition] = field(default_factory=dict)
    ignore: list[Definition] = field(default_factory=list)
    imports: list[tuple[str, str, int]] = field(default_factory=list)  # (common name, local name, line)


def _tokens(text: str) -> Iterator[_Tok]:
    pos, line = 0, 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise syntax_error(line, f"unexpected character {text[pos]!r}")
        kind = match.lastgroup or ""
        if kind not in ("blank", "comment"):
            yield _Tok(kind, match.group(), line)
        line += match.group().count("\n")
        pos = match.end()


def _statements(text: str) -> Iterator[list[_Tok]]:
    """Token lists of the statements; a line starting with ``|`` continues the previous one."""
    current: list[_Tok] = []
    pending_newline = False
    for tok in _tokens(text):
        if tok.kind == "nl":
            pending_newline = True
            continue
        if pending_newline and current and tok.text != "|":
            yield current
            current = []
        pending_newline = False
        current.append(tok)
    if current:
        yield current


class _Parser:
    def __init__(self, toks: list[_Tok]) -> None:
        self.toks, self.i, self.line = toks, 0, toks[0].line

    def peek(self, offset: int = 0) -> _Tok | None:
        return self.toks[self.i + offset] if self.i + offset < len(self.toks) else None

    def take(self, text: str | None = None, kind: str | None = None) -> _Tok:
        tok = self.peek()
        if tok is None or (text is not None and tok.text != text) or (kind is not None and tok.kind != kind):
            got = "end of line" if tok is None else repr(tok.text)
            raise syntax_error(self.line, f"expected {text or kind}, got {got}")
        self.i += 1
        self.line = tok.line
        return tok

    def at(self, *texts: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text in texts and tok.kind in ("punct", "arrow", "dotdot")

    def done(self) -> None:
        if self.peek() is not None:
            raise syntax_error(self.line, f"unexpected {self.toks[self.i].text!r}")

    def expansions(self, in_terminal: bool) -> Node:
        branches = [self.expansion(in_terminal)]
        while self.at("|"):
            self.take("|")
            branches.append(self.expansion(in_terminal))
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def expansion(self, in_terminal: bool) -> Node:
        items: list[Node] = []
        while self.peek() is not None and not self.at("|", ")", "]", "->"):
            items.append(self.expr(in_terminal))
        if self.at("->"):  # an alias only names the tree node: same language
            self.take("->")
            self.take(kind="name")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def expr(self, in_terminal: bool) -> Node:
        atom = self.atom(in_terminal)
        if self.at("+", "*", "?"):
            low, high = {"+": (1, None), "*": (0, None), "?": (0, 1)}[self.take().text]
            return Repeat(atom, low, high)
        if not self.at("~"):
            return atom
        self.take("~")
        low = high = int(self.take(kind="number").text)
        if self.at(".."):
            self.take("..")
            high = int(self.take(kind="number").text)
        if low < 0 or high < low:
            raise syntax_error(self.line, f"bad repetition range ~ {low}..{high}")
        return Repeat(atom, low, high)

    def atom(self, in_terminal: bool) -> Node:
        tok = self.take()
        if tok.text in ("(", "["):
            inner = self.expansions(in_terminal)
            self.take(")" if tok.text == "(" else "]")
            return inner if tok.text == "(" else Repeat(inner, 0, 1)
        if tok.kind in ("string", "regexp"):
            body = self.literal(tok)
            return body if in_terminal else Token(body, tok.text, tok.line)
        if tok.kind == "name":
            if self.at("{"):
                construct = f"`{tok.text}{{...}}` (a template or llguidance's x{{m,n}})"
                detail = "write the template out as plain rules; for repetition use `x ~ m..n`"
                raise unsupported(tok.line, construct, detail)
            return Name(tok.text, tok.line)
        special = {"<": "a special token <...> (llguidance)", "@": "a grammar reference @name (llguidance)"}
        if tok.text in special or tok.kind == "directive":
            construct = special.get(tok.text, f"`{tok.text}` inside a rule")
            raise unsupported(tok.line, construct, "it is outside the translated Lark subset; remove it")
        raise syntax_error(tok.line, f"unexpected {tok.text!r}")

    def literal(self, tok: _Tok) -> Node:
        if tok.kind == "regexp":
            return regex_node(tok.text, tok.line)
        if self.at(".."):
            self.take("..")
            return range_node(tok.text, self.take(kind="string").text, tok.line)
        return string_node(tok.text, tok.line)


def _check_name(name: str, terminal: bool, line: int) -> None:
    if not (_TERMINAL if terminal else _RULE).fullmatch(name):
        raise syntax_error(line, f"bad {'terminal' if terminal else 'rule'} name {name!r}")


def _definition(parser: _Parser, grammar: LarkGrammar) -> None:
    while parser.at("?", "!"):  # tree-shaping modifiers: same language
        parser.take()
    name = parser.take(kind="name")
    terminal = name.text.lstrip("_")[:1].isupper()
    _check_name(name.text, terminal, name.line)
    if parser.at("{", "["):
        what = "a template rule{...}" if parser.at("{") else "llguidance rule options name[...]"
        raise unsupported(name.line, what, "no exact equivalent; write the rule out without it")
    if parser.at("."):  # priority: only ranks parse trees (Earley), never changes the strings accepted
        parser.take(".")
        parser.take(kind="number")
    parser.take(":")
    body = parser.expansions(in_terminal=terminal)
    parser.done()
    table = grammar.terminals if terminal else grammar.rules
    if name.text in table:
        raise syntax_error(name.line, f"`{name.text}` is defined twice")
    table[name.text] = Definition(name.text, body, name.line)


def _twice(name: str) -> tuple[str, str]:
    return name, name


def _import(parser: _Parser, grammar: LarkGrammar) -> None:
    line = parser.line
    if parser.at("."):
        raise unsupported(line, "a relative %import", _ONLY_COMMON)
    module = parser.take(kind="name").text
    names: list[tuple[str, str]] = []
    if parser.at("("):
        parser.take("(")
        names.append(_twice(parser.take(kind="name").text))
        while parser.at(","):
            parser.take(",")
            names.append(_twice(parser.take(kind="name").text))
        parser.take(")")
    else:
        parser.take(".")
        name = parser.take(kind="name").text
        if parser.at("."):
            module = f"{module}.{name}..."
        alias = name
        if parser.at("->"):
            parser.take("->")
            alias = parser.take(kind="name").text
        names.append((name, alias))
    parser.done()
    if module != "common":
        raise unsupported(line, f"%import {module}", _ONLY_COMMON)
    grammar.imports.extend((name, alias, line) for name, alias in names)


def parse_lark(text: str) -> LarkGrammar:
    grammar = LarkGrammar()
    for toks in _statements(text):
        parser = _Parser(toks)
        head = toks[0]
        if head.kind != "directive":
            _definition(parser, grammar)
            continue
        parser.take()
        if head.text == "%ignore":
            grammar.ignore.append(Definition(f"%ignore (line {head.line})", parser.expansions(True), head.line))
            parser.done()
        elif head.text == "%import":
            _import(parser, grammar)
        else:
            why = _REFUSED_DIRECTIVES.get(head.text, "it is outside the translated Lark subset")
            raise unsupported(head.line, f"the directive {head.text}", f"{why}; remove it")
    return grammar

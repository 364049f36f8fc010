"""Refuse the Lark grammars whose lexing would make the character-level translation looser
(pure).

Lark (Earley, dynamic lexer; llguidance follows it) matches each terminal where it is
expected as far as it can, and never re-splits. The translated grammar may split anywhere. Both
admit the same strings when no terminal T can go on with a character that can also start a
terminal U allowed right after T (``%ignore`` terminals included): then the longest match of T
ends exactly where the translation's T ends (Lark's match is the longest one except in the case
documented in ``grammars.lark.translate``: Python's backtracking order). This module computes, for each
terminal used, the terminals that can follow it, and refuses any overlap, with two exceptions
where merging does not change the strings accepted:

- an ``%ignore`` terminal followed by itself, when two of its matches make one match (e.g.
  ``WS``): Lark skips the run in one step, the translation in several;
- a terminal repeated directly and without bound (``T*``, ``T+``) when two of its matches make
  one match (e.g. ``WORD+``): Lark reads the run as fewer repetitions.

Also refused: terminals matching the empty string (Lark rejects them in Earley) and terminals
too large for the check.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from grammars.errors import UnsupportedGrammarError
from grammars.lark.automata import MAX_STATES, TerminalFacts, TooComplex, terminal_facts
from grammars.lark.nodes import Alt, Name, Node, Repeat, Seq, Token, intersect
from grammars.lark.syntax import LarkGrammar

__all__ = ["check_lexing"]

Key = tuple[str, "str | int | Node | None"]  # ("name", NAME) | ("anon", body) | ("ignore", index)
_END: Key = ("end", None)
_Set = frozenset[Key]


@dataclass
class _Flow:
    grammar: LarkGrammar
    first: dict[str, _Set] = field(default_factory=dict)
    nullable: dict[str, bool] = field(default_factory=dict)
    follow_rule: dict[str, set[Key]] = field(default_factory=dict)
    follow: dict[Key, set[Key]] = field(default_factory=dict)
    labels: dict[Key, tuple[str, int]] = field(default_factory=dict)
    known: dict[Key, TerminalFacts] = field(default_factory=dict)

    def body(self, key: Key) -> Node:
        what = key[1]
        if isinstance(what, str):
            return self.grammar.terminals[what].body
        if isinstance(what, int):
            return self.grammar.ignore[what].body
        assert what is not None
        return what

    def facts(self, key: Key) -> TerminalFacts:
        if key not in self.known:
            self.known[key] = self.compute(key)
        return self.known[key]

    def compute(self, key: Key) -> TerminalFacts:
        try:
            return terminal_facts(self.body(key), lambda name: self.grammar.terminals[name].body)
        except TooComplex:
            label, line = self.labels[key]
            detail = f"more than {MAX_STATES} automaton states; make it smaller (e.g. lower repetition counts)"
            message = f"line {line}: {label} is not supported: too large to check against Lark's lexing, {detail}"
            raise UnsupportedGrammarError(message, construct="terminal too large", line=line) from None

    def token(self, node: Token | Name) -> Key:
        if isinstance(node, Token):
            key: Key = ("anon", node.body)
            self.labels.setdefault(key, (node.label, node.line))
        else:
            key = ("name", node.name)
            self.labels.setdefault(key, (f"terminal {node.name}", self.grammar.terminals[node.name].line))
        return key

    def merges(self, node: Repeat) -> bool:
        item = node.item
        is_token = isinstance(item, Token) or (isinstance(item, Name) and item.is_terminal)
        if not is_token or node.low > 1 or node.high is not None:
            return False
        assert isinstance(item, (Token, Name))
        return self.facts(self.token(item)).closed

    def first_of(self, node: Node) -> tuple[_Set, bool]:
        """(first terminals, nullable) of ``node`` with the rules' current values."""
        if isinstance(node, Token) or (isinstance(node, Name) and node.is_terminal):
            return frozenset({self.token(node)}), False
        if isinstance(node, Name):
            return self.first.get(node.name, frozenset()), self.nullable.get(node.name, False)
        if isinstance(node, (Seq, Alt)):
            parts = [self.first_of(item) for item in node.items]
            if isinstance(node, Alt):
                return frozenset().union(*(p[0] for p in parts)), any(p[1] for p in parts)
            first: _Set = frozenset()
            for got, empty in reversed(parts):
                first = got | first if empty else got
            return first, all(p[1] for p in parts)
        assert isinstance(node, Repeat)
        first, nullable = self.first_of(node.item)
        return first, nullable or node.low == 0

    def walk(self, node: Node, after: _Set, grown: list[str]) -> None:
        """Record what may follow each terminal of ``node`` when ``after`` follows it; the
        rules whose follow set grew go to ``grown``."""
        if isinstance(node, Token) or (isinstance(node, Name) and node.is_terminal):
            self.follow.setdefault(self.token(node), set()).update(after)
        elif isinstance(node, Name):
            known = self.follow_rule.setdefault(node.name, set())
            if not after <= known:
                known.update(after)
                grown.append(node.name)
        elif isinstance(node, Seq):
            for item in reversed(node.items):
                self.walk(item, after, grown)
                got, empty = self.first_of(item)
                after = got | after if empty else got
        elif isinstance(node, Alt):
            for item in node.items:
                self.walk(item, after, grown)
        else:
            assert isinstance(node, Repeat)
            loops = (node.high is None or node.high >= 2) and not self.merges(node)
            self.walk(node.item, after | self.first_of(node.item)[0] if loops else after, grown)


def _propagate(flow: _Flow, rules: Sequence[str]) -> None:
    """First terminals and nullability of the rules, then what follows every terminal
    (worklists: a rule is visited again only when what it depends on grew)."""
    users: dict[str, set[str]] = {rule: set() for rule in rules}
    for rule in rules:
        for ref in _rule_refs(flow.grammar.rules[rule].body):
            users[ref].add(rule)
    todo, queued = list(rules), set(rules)
    while todo:
        rule = todo.pop()
        queued.discard(rule)
        got = flow.first_of(flow.grammar.rules[rule].body)
        if got != (flow.first.get(rule, frozenset()), flow.nullable.get(rule, False)):
            flow.first[rule], flow.nullable[rule] = got
            todo += [user for user in users[rule] if user not in queued]
            queued |= users[rule]
    flow.follow_rule["start"] = {_END}
    pending = deque(rules)  # in order of first use from start: callers mostly before callees
    while pending:
        rule = pending.popleft()
        grown: list[str] = []
        flow.walk(flow.grammar.rules[rule].body, frozenset(flow.follow_rule.get(rule, set())), grown)
        pending.extend(name for name in grown if name not in pending)


def _rule_refs(node: Node) -> list[str]:
    if isinstance(node, Name) and not node.is_terminal:
        return [node.name]
    if isinstance(node, (Seq, Alt)):
        return [ref for item in node.items for ref in _rule_refs(item)]
    return _rule_refs(node.item) if isinstance(node, Repeat) else []


def _add_ignore(flow: _Flow) -> None:
    ignore: list[Key] = [("ignore", i) for i in range(len(flow.grammar.ignore))]
    if not ignore:
        return
    for i, key in enumerate(ignore):
        flow.labels[key] = (f"%ignore #{i + 1}", flow.grammar.ignore[i].line)
    run_follow = set(ignore) | flow.first["start"] | {_END}
    for key in list(flow.follow):
        run_follow |= flow.follow[key]
        flow.follow[key] |= set(ignore)
    for key in ignore:
        flow.follow[key] = run_follow - ({key} if flow.facts(key).closed else set())


def _refuse_overlap(flow: _Flow, key: Key, other: Key, chars: tuple[tuple[int, int], ...]) -> None:
    (label, line), (other_label, _) = flow.labels[key], flow.labels[other]
    example = chr(chars[0][0])
    message = (
        f"line {line}: {label} followed by {other_label} cannot be translated exactly: {label} can go on "
        f"with {example!r}, which can also start {other_label}, and Lark matches a terminal as far as it "
        f"can, so it would not split such text where the translation could. Put a delimiter between "
        f"them, merge them into one terminal, or change one so that they do not overlap"
    )
    raise UnsupportedGrammarError(message, construct=f"overlapping terminals {label}, {other_label}", line=line)


def check_lexing(grammar: LarkGrammar, rules: Sequence[str]) -> None:
    """Raise ``UnsupportedGrammarError`` unless the translation of ``rules`` (the rules reachable
    from ``start``) admits exactly the strings Lark's lexing admits."""
    flow = _Flow(grammar)
    _propagate(flow, rules)
    _add_ignore(flow)
    for key in flow.follow:
        if flow.facts(key).nullable:
            label, line = flow.labels[key]
            detail = "Lark's Earley parser rejects zero-width terminals; make it non-empty and optional where used"
            message = f"line {line}: {label} is not supported: it matches the empty string; {detail}"
            raise UnsupportedGrammarError(message, construct="zero-width terminal", line=line)
    for key, followers in flow.follow.items():
        extend = flow.facts(key).extend
        if not extend:  # no match of it is a prefix of another: nothing to overlap
            continue
        for other in sorted(followers - {_END}, key=repr):
            overlap = intersect(extend, flow.facts(other).first)
            if overlap:
                _refuse_overlap(flow, key, other, overlap)

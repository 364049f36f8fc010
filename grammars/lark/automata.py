"""Finite automata of terminals (pure): what the lexing check of ``grammars.lark.lexing``
needs to know about a terminal's language.

A terminal's tree becomes a Glushkov automaton (one state per character position, no empty
moves; counted repetitions are unrolled), then a DFA by the subset construction over
character ranges. A count above ``MAX_COUNT`` is read as unbounded (``x{2,5000}`` as
``x{2,}``, ``x{5000}`` as ``x{50,}``): a larger language, so ``first`` and ``extend`` can only
grow and the check only gets stricter; ``closed`` is then never claimed. Every DFA state is
live: a position of a regex without empty classes always lies on some word of its language.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from grammars.lark.nodes import Alt, Chars, Name, Node, Ranges, Repeat, Seq, Text, complement, intersect, normalize

__all__ = ["TerminalFacts", "TooComplex", "terminal_facts"]

MAX_POSITIONS = 4000
MAX_COUNT = 50
MAX_STATES = 4000
_START = -1


class TooComplex(Exception):
    """The automaton went past MAX_POSITIONS or MAX_STATES."""


@dataclass(frozen=True)
class TerminalFacts:
    """``first``: the characters a match can start with; ``extend``: the characters that can
    follow a complete match and still lead to a longer one (empty: no match is a prefix of
    another); ``nullable``: matches the empty string; ``closed``: the concatenation of two
    matches is a match."""

    first: Ranges
    extend: Ranges
    nullable: bool
    closed: bool


@dataclass
class _Glushkov:
    resolve: Callable[[str], Node]
    widened: bool = False  # a count above MAX_COUNT was read as unbounded
    chars: list[Ranges] = field(default_factory=list)
    follow: list[set[int]] = field(default_factory=list)

    def position(self, ranges: Ranges) -> int:
        if len(self.chars) >= MAX_POSITIONS:
            raise TooComplex
        self.chars.append(ranges)
        self.follow.append(set())
        return len(self.chars) - 1

    def concat(self, a: _Part, b: _Part) -> _Part:
        for p in a.last:
            self.follow[p] |= b.first
        first = a.first | b.first if a.nullable else a.first
        last = a.last | b.last if b.nullable else b.last
        return _Part(a.nullable and b.nullable, first, last)

    def build(self, node: Node) -> _Part:
        if isinstance(node, Chars):
            p = self.position(node.ranges)
            return _Part(False, frozenset({p}), frozenset({p}))
        if isinstance(node, (Text, Seq)):
            parts = [Chars(((ord(c), ord(c)),)) for c in node.value] if isinstance(node, Text) else node.items
            whole = _Part(True, frozenset(), frozenset())
            for item in parts:
                whole = self.concat(whole, self.build(item))
            return whole
        if isinstance(node, Alt):
            branches = [self.build(item) for item in node.items]
            return _Part(
                any(b.nullable for b in branches),
                frozenset().union(*(b.first for b in branches)),
                frozenset().union(*(b.last for b in branches)),
            )
        if isinstance(node, Repeat):
            return self.repeat(node)
        if isinstance(node, Name):
            return self.build(self.resolve(node.name))
        return self.build(node.body)

    def repeat(self, node: Repeat) -> _Part:
        if node.low > MAX_COUNT or (node.high or 0) > MAX_COUNT:
            self.widened = True
            node = Repeat(node.item, min(node.low, MAX_COUNT), None)
        whole = _Part(True, frozenset(), frozenset())
        for _ in range(node.low):
            whole = self.concat(whole, self.build(node.item))
        if node.high is None:
            loop = self.build(node.item)
            for p in loop.last:
                self.follow[p] |= loop.first
            return self.concat(whole, _Part(True, loop.first, loop.last))
        for _ in range(node.high - node.low):  # x?x?x? is x{0,3}
            extra = self.build(node.item)
            whole = self.concat(whole, _Part(True, extra.first, extra.last))
        return whole


@dataclass(frozen=True)
class _Part:
    nullable: bool
    first: frozenset[int]
    last: frozenset[int]


@dataclass
class _Dfa:
    accepting: list[bool]
    moves: list[list[tuple[Ranges, int]]]  # per state: disjoint ranges → next state


def _split(positions: set[int], chars: list[Ranges]) -> list[tuple[Ranges, frozenset[int]]]:
    """The characters the positions accept, grouped by the set of positions accepting them."""
    cuts = sorted({b for p in positions for lo, hi in chars[p] for b in (lo, hi + 1)})
    starts = {p: [lo for lo, _ in chars[p]] for p in positions}
    groups: dict[frozenset[int], list[tuple[int, int]]] = {}
    for lo, nxt in zip(cuts, cuts[1:]):
        members = frozenset(
            p for p in positions if (k := bisect_right(starts[p], lo) - 1) >= 0 and chars[p][k][1] >= lo
        )
        if members:
            groups.setdefault(members, []).append((lo, nxt - 1))
    return [(normalize(ranges), members) for members, ranges in groups.items()]


def _determinize(auto: _Glushkov, top: _Part) -> _Dfa:
    states: list[frozenset[int]] = [frozenset({_START})]
    index = {states[0]: 0}
    dfa = _Dfa([], [])
    for state in states:
        dfa.accepting.append(bool(state & top.last) or (_START in state and top.nullable))
        nexts: set[int] = set()
        for p in state:
            nexts |= top.first if p == _START else auto.follow[p]
        moves = []
        for ranges, target in _split(nexts, auto.chars):
            if target not in index:
                if len(states) >= MAX_STATES:
                    raise TooComplex
                index[target] = len(states)
                states.append(target)
            moves.append((ranges, index[target]))
        dfa.moves.append(moves)
    return dfa


def _closed(dfa: _Dfa) -> bool:
    """L·L ⊆ L: from every accepting state, every word of L still reaches acceptance."""
    for q in (s for s, ok in enumerate(dfa.accepting) if ok):
        seen, todo = {(0, q)}, [(0, q)]
        while todo:
            p, r = todo.pop()
            if dfa.accepting[p] and not dfa.accepting[r]:
                return False
            covered = normalize(rr for r_ranges, _ in dfa.moves[r] for rr in r_ranges)
            for ranges, p2 in dfa.moves[p]:
                if intersect(ranges, complement(covered)):
                    return False  # a word of L leaves the automaton started at q
                for r_ranges, r2 in dfa.moves[r]:
                    if intersect(ranges, r_ranges) and (p2, r2) not in seen:
                        seen.add((p2, r2))
                        todo.append((p2, r2))
    return True


def terminal_facts(body: Node, resolve: Callable[[str], Node]) -> TerminalFacts:
    """The facts of the terminal ``body`` (terminal names inside it found by ``resolve``);
    raises ``TooComplex`` past the size limits."""
    auto = _Glushkov(resolve)
    top = auto.build(body)
    dfa = _determinize(auto, top)
    first = normalize(r for ranges, _ in dfa.moves[0] for r in ranges)
    extend = normalize(r for s, ok in enumerate(dfa.accepting) if ok for ranges, _ in dfa.moves[s] for r in ranges)
    return TerminalFacts(first, extend, top.nullable, not auto.widened and _closed(dfa))

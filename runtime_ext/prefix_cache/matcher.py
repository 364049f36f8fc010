"""Radix tree over token pages with combined-block matching (pure logic: no torch, no sglang).

KV is allocated in pages of ``page_size`` tokens; prefixes are reused in *units* of
``combine_blocks = C`` adjacent pages (``C * page_size`` tokens), all or nothing.

Contracts:
- ``insert(ns, tokens, pages)``: stores the full pages of ``tokens`` (``pages[i]`` holds tokens
  ``[i*P, (i+1)*P)``) under namespace ``ns``. Pages already in the tree are kept; the caller's
  duplicates are returned (the caller frees them). A trailing partial page is never stored.
- ``match(ns, tokens)``: walks full pages from the root of ``ns``. With C > 1 the match is cut
  to the last *complete* unit: the first unit with a page missing ends it (never a partial
  unit); pages of that incomplete unit are counted as ``abandoned``. With
  ``contiguous_ids=True`` a unit also needs its page ids consecutive (``p, p+1, …``), as
  kernels wanting larger physical blocks do. Nothing mutates except access times and counters.
- ``lock(node)`` / ``unlock(node)``: a locked node and its ancestors are never evicted. While a
  returned match's node is locked, its pages stay valid.
- ``evict(n)``: frees at least ``n`` pages (fewer if not enough are evictable), least recently
  used leaves first; it trims whole trailing partial units so no unit is left half-present.
  Returns the freed page ids.
- Namespaces (LoRA id, cache salt) never share nodes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Hashable, Sequence


@dataclass(eq=False)
class Node:
    key: tuple[int, ...] = ()
    page: int = -1
    parent: "Node | None" = None
    depth: int = 0  # pages from the root
    children: "dict[tuple[int, ...], Node]" = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0


@dataclass(frozen=True)
class Match:
    pages: list[int]
    node: Node  # the deepest reused node (the root when nothing is reused)
    abandoned_pages: int = 0
    page_size: int = 1

    @property
    def tokens(self) -> int:
        return len(self.pages) * self.page_size


@dataclass
class Counters:
    hit_tokens: int = 0
    miss_tokens: int = 0
    abandoned_pages: int = 0
    evicted_pages: int = 0


class PageRadix:
    def __init__(self, page_size: int, combine_blocks: int = 1, *, contiguous_ids: bool = False) -> None:
        if page_size < 1 or combine_blocks < 1:
            raise ValueError(f"page_size and combine_blocks must be >= 1, got {page_size}, {combine_blocks}")
        self.page_size, self.combine, self.contiguous_ids = page_size, combine_blocks, contiguous_ids
        self.roots: dict[Hashable, Node] = {}
        self.counters = Counters()
        self._clock = itertools.count(1)

    @classmethod
    def simulate(
        cls,
        page_size: int,
        combine_blocks: int,
        sequences: Sequence[Sequence[int]],
        namespace: Hashable = None,
        **kwargs: bool,
    ) -> "PageRadix":
        """A tree holding ``sequences`` with fresh page ids 0, 1, 2, … in insertion order (for tests)."""
        tree, ids = cls(page_size, combine_blocks, **kwargs), itertools.count()
        for seq in sequences:
            tree.insert(namespace, seq, [next(ids) for _ in range(len(seq) // page_size)])
        return tree

    def _root(self, ns: Hashable) -> Node:
        return self.roots.setdefault(ns, Node())

    def _pages_of(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        p = self.page_size
        return [tuple(tokens[i : i + p]) for i in range(0, len(tokens) - p + 1, p)]

    def insert(self, ns: Hashable, tokens: Sequence[int], pages: Sequence[int]) -> list[int]:
        keys = self._pages_of(tokens)
        if len(pages) < len(keys):
            raise ValueError(f"{len(keys)} full pages of tokens but {len(pages)} page ids")
        node, duplicates, now = self._root(ns), [], next(self._clock)
        for key, page in zip(keys, pages):
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = Node(key, page, node, node.depth + 1)
            elif child.page != page:
                duplicates.append(page)
            child.last_access = now
            node = child
        return duplicates

    def match(self, ns: Hashable, tokens: Sequence[int]) -> Match:
        node, path, now = self.roots.get(ns), [], next(self._clock)
        for key in self._pages_of(tokens) if node is not None else []:
            child = node.children.get(key) if node is not None else None
            if child is None:
                break
            path.append(node := child)
        usable = self._usable(path)
        for n in path[:usable]:
            n.last_access = now
        abandoned = len(path) - usable
        self.counters.abandoned_pages += abandoned
        self.counters.hit_tokens += usable * self.page_size
        self.counters.miss_tokens += len(tokens) - usable * self.page_size
        last = path[usable - 1] if usable else self._root(ns)
        return Match([n.page for n in path[:usable]], last, abandoned, self.page_size)

    def _usable(self, path: list[Node]) -> int:
        """Pages of ``path`` in complete (and, if required, id-contiguous) units."""
        c = self.combine
        units = len(path) // c
        if self.contiguous_ids:
            for u in range(units):
                ids = [n.page for n in path[u * c : (u + 1) * c]]
                if ids != list(range(ids[0], ids[0] + c)):
                    units = u
                    break
        return units * c

    def lock(self, node: Node | None) -> None:
        while node is not None:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node | None) -> None:
        while node is not None:
            if node.lock_ref <= 0:
                raise RuntimeError("unlock without a matching lock")
            node.lock_ref -= 1
            node = node.parent

    def _leaves(self) -> list[Node]:
        out, stack = [], [r for r in self.roots.values()]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.parent is not None and node.lock_ref == 0:
                out.append(node)
        return out

    def evict(self, num_pages: int) -> list[int]:
        freed: list[int] = []
        while len(freed) < num_pages:
            leaves = self._leaves()
            if not leaves:
                break
            node = min(leaves, key=lambda n: n.last_access)
            freed += self._remove_to_unit_boundary(node)
        self.counters.evicted_pages += len(freed)
        return freed

    def _remove_to_unit_boundary(self, node: Node) -> list[int]:
        """Remove ``node`` and then its parents while they become unlocked leaves inside the
        same unit (so the unit is not left half-present)."""
        freed = []
        while True:
            parent = node.parent
            if parent is None:
                raise RuntimeError("a root node is never removed")
            del parent.children[node.key]
            freed.append(node.page)
            if (node.depth - 1) % self.combine == 0 or parent.parent is None or parent.children or parent.lock_ref:
                return freed
            node = parent

    def total_pages(self) -> int:
        count, stack = 0, list(self.roots.values())
        while stack:
            node = stack.pop()
            count += len(node.children)
            stack.extend(node.children.values())
        return count

"""Subschemas the grammar can never complete (pure: no torch, sglang, fastapi or xgrammar).

xgrammar 0.2.7 compiles a ``$ref`` chain that never consumes input (``a -> b -> a``, also
through ``anyOf``/``oneOf``/``allOf``) without complaint, but where such a value starts
its token mask is empty: SGLang then samples an arbitrary token, fails to advance the
matcher and aborts the request ("Grammar accept_token failed"). A required property (or
``minItems``) that leads back to its own schema does consume input, but never ends: no
finite JSON value matches, and generation only stops at ``max_tokens``. Both are
*unproductive* in grammar terms (no finite string derives from them).
``tests/unit/grammars/test_schema_productive_xgrammar.py`` pins each shape to what
xgrammar does.

``find_unproductive`` computes, over the subschemas the grammar uses (reached from the
root, ``$ref`` followed, ``$defs`` only through references), which ones have a finite
instance *as xgrammar reads them* (siblings of an applicator ignored, ``properties``
imply an object, ``enum``/``const`` emit only their values, optional properties and
items may be left out), and reports the first one reached that has none. A literal
``false`` is not reported itself (``additionalProperties: false`` is the usual use);
a required position holding it makes its parent unproductive.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grammars.errors import UnsatisfiableSchemaError
from grammars.json_schema.access import member_dict, member_list
from grammars.json_schema.canonical import escape_token, iter_subschemas

__all__ = ["Unproductive", "check_productive", "find_unproductive"]

_APPLICATORS = ("$ref", "anyOf", "oneOf", "allOf")  # xgrammar's order (grammars.json_schema.keywords)
_OBJECT_INFERRED_BY = ("properties", "additionalProperties")
_ARRAY_INFERRED_BY = ("items", "prefixItems")
_OBJECT_CHILDREN = ("additionalProperties", "unevaluatedProperties", "propertyNames")
_ARRAY_CHILDREN = ("items", "unevaluatedItems")


@dataclass(frozen=True)
class _Edge:
    """``target`` (a subschema pointer) is needed, through ``via``; ``consumes``: the
    grammar emits input (a key, a ``[``) before the target's value starts."""

    target: str
    via: str
    consumes: bool


@dataclass(frozen=True)
class Unproductive:
    """A subschema the grammar reaches that no finite value matches.

    ``pointer``: where to fix it (the first subschema of the loop, else the subschema
    itself); ``kind``: ``"cycle"`` (a reference loop consuming nothing: xgrammar allows no token
    there), ``"recursion"`` (every level requires another) or ``"empty"`` (it leads
    only to ``false``); ``path``: the loop, as ``pointer -(via)-> pointer`` text;
    ``keyword``: the keyword to change.
    """

    pointer: str
    kind: str
    path: str
    keyword: str | None


def find_unproductive(schema: dict[str, Any]) -> Unproductive | None:
    """The first unproductive subschema the grammar reaches (breadth-first from the
    root), or None. Linear in the number of subschemas and references."""
    nodes = {node.pointer: node.value for node in iter_subschemas(schema)}
    rules = {pointer: _rule(pointer, value) for pointer, value in nodes.items()}
    productive = _productive(rules, nodes)
    seen, queue = {""}, deque([""])
    while queue:
        pointer = queue.popleft()
        value = nodes.get(pointer)
        if pointer not in productive and value is not False:
            return _explain(pointer, rules, nodes, productive)
        for child in _used_children(pointer, value):
            if child in nodes and child not in seen:
                seen.add(child)
                queue.append(child)
    return None


def check_productive(schema: dict[str, Any]) -> None:
    """``UnsatisfiableSchemaError`` for the first subschema the grammar reaches that no
    finite value matches (``grammars.json_schema.productive``)."""
    found = find_unproductive(schema)
    if found is None:
        return
    if found.kind == "cycle":
        why = (
            f"the $ref loop {found.path} consumes no input, so no value can ever start "
            "there (the grammar would allow no token at all). Break the loop: make one "
            "schema in it a real schema, or give it an anyOf branch that is not a "
            'reference (e.g. {"type": "null"})'
        )
    elif found.kind == "recursion":
        why = (
            f"every value requires another one without end ({found.path}), so no finite "
            f"JSON value matches. Make the recursion optional (drop it from "
            f"`{found.keyword}`) or give it an anyOf branch that ends it "
            '(e.g. {"type": "null"})'
        )
    else:
        why = (
            "it matches no value: it leads only to `false` (a $ref to false, or anyOf "
            "branches that are all false); remove it or point it at a real schema"
        )
    raise UnsatisfiableSchemaError(
        f"the schema can never be completed at {found.pointer or '/'}: {why}",
        pointer=found.pointer,
        keyword=found.keyword,
    )


def _rule(pointer: str, value: Any) -> list[list[_Edge]]:
    """What ``value`` needs to match something: any one alternative (a list) whose
    edges all lead to productive subschemas. ``[[]]``: always; ``[]``: never."""
    if not isinstance(value, dict):
        return [] if value is False else [[]]
    applicator = next((k for k in _APPLICATORS if k in value), None)
    if applicator == "$ref":
        ref = value["$ref"]
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            return [[_Edge(ref[1:], "$ref", False)]]
        return [[]]
    if applicator is not None:
        count = len(value[applicator]) if isinstance(value[applicator], list) else 0
        edges = [_Edge(f"{pointer}/{applicator}/{i}", applicator, False) for i in range(count)]
        if applicator == "allOf":
            return [edges]
        return [[edge] for edge in edges] or [[]]
    if "enum" in value or "const" in value:
        return [[]]
    alternatives = []
    for kind in _kinds(value):
        if kind == "object":
            alternatives.append(_object_needs(pointer, value))
        elif kind == "array":
            alternatives.append(_array_needs(pointer, value))
        else:
            return [[]]  # a scalar type, or any value
    return alternatives or [[]]


def _kinds(value: dict[str, Any]) -> list[str]:
    """The JSON types the grammar emits for ``value`` ("any" when unconstrained)."""
    raw = value.get("type")
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        return [t for t in raw if isinstance(t, str)] or ["any"]
    inferred = [
        kind
        for kind, keys in (("object", _OBJECT_INFERRED_BY), ("array", _ARRAY_INFERRED_BY))
        if any(key in value for key in keys)
    ]
    return inferred or ["any"]


def _object_needs(pointer: str, value: dict[str, Any]) -> list[_Edge]:
    props = member_dict(value, "properties")
    required = member_list(value, "required")
    return [
        _Edge(f"{pointer}/properties/{escape_token(name)}", "required", True)
        for name in dict.fromkeys(required)
        if isinstance(name, str) and name in props
    ]


def _array_needs(pointer: str, value: dict[str, Any]) -> list[_Edge]:
    raw = value.get("minItems", 0)
    least = int(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else 0
    prefix = member_list(value, "prefixItems")
    edges = [_Edge(f"{pointer}/prefixItems/{i}", "minItems", True) for i in range(min(least, len(prefix)))]
    if least > len(prefix) and "items" in value:
        edges.append(_Edge(f"{pointer}/items", "minItems", True))
    return edges


def _productive(rules: dict[str, list[list[_Edge]]], nodes: dict[str, Any]) -> set[str]:
    """Least fixpoint, by propagation (each edge is looked at once)."""
    missing: dict[tuple[str, int], int] = {}
    waiting: defaultdict[str, list[tuple[str, int]]] = defaultdict(list)
    ready: list[str] = []
    for pointer, alternatives in rules.items():
        for i, edges in enumerate(alternatives):
            needed = {e.target for e in edges if e.target in nodes}  # unknown targets: assume fine
            missing[pointer, i] = len(needed)
            for target in needed:
                waiting[target].append((pointer, i))
            if not needed:
                ready.append(pointer)
    done: set[str] = set()
    while ready:
        pointer = ready.pop()
        if pointer in done:
            continue
        done.add(pointer)
        for parent, i in waiting.pop(pointer, ()):
            missing[parent, i] -= 1
            if missing[parent, i] == 0:
                ready.append(parent)
    return done


def _used_children(pointer: str, value: Any) -> Iterator[str]:
    """The subschemas the grammar compiles for ``value`` (references followed)."""
    if not isinstance(value, dict):
        return
    applicator = next((k for k in _APPLICATORS if k in value), None)
    if applicator == "$ref":
        ref = value["$ref"]
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            yield ref[1:]
        return
    if applicator is not None:
        branches = value[applicator] if isinstance(value[applicator], list) else []
        yield from (f"{pointer}/{applicator}/{i}" for i in range(len(branches)))
        return
    if "enum" in value or "const" in value:
        return
    kinds = _kinds(value)
    if "object" in kinds or "any" in kinds:
        for key in ("properties", "patternProperties"):
            members = member_dict(value, key)
            yield from (f"{pointer}/{key}/{escape_token(name)}" for name in members)
        yield from (f"{pointer}/{key}" for key in _OBJECT_CHILDREN if key in value)
    if "array" in kinds or "any" in kinds:
        prefix = member_list(value, "prefixItems")
        yield from (f"{pointer}/prefixItems/{i}" for i in range(len(prefix)))
        yield from (f"{pointer}/{key}" for key in _ARRAY_CHILDREN if key in value)


def _explain(
    pointer: str, rules: dict[str, list[list[_Edge]]], nodes: dict[str, Any], productive: set[str]
) -> Unproductive:
    """A loop of unproductive subschemas reached from ``pointer`` (one through references
    only, if there is one): ``cycle`` when the loop itself consumes nothing."""
    for consuming in (False, True):
        found = _find_loop(pointer, rules, nodes, productive, consuming)
        if found is not None:
            path, start = found
            text = _show(pointer) + "".join(f" -({e.via})-> {_show(e.target)}" for e in path)
            taken = [e.via for e in path[start:] if e.consumes]
            kind, keyword = ("recursion", taken[0]) if taken else ("cycle", "$ref")
            entry = path[start - 1].target if start else pointer
            return Unproductive(entry, kind, text, keyword)
    return Unproductive(pointer, "empty", _show(pointer), None)


def _find_loop(
    start: str, rules: dict[str, list[list[_Edge]]], nodes: dict[str, Any], productive: set[str], consuming: bool
) -> tuple[list[_Edge], int] | None:
    """Edges from ``start`` to the first repeated subschema, and the index in them where
    the loop begins (iterative DFS through unproductive subschemas only; consuming
    edges only if ``consuming``)."""
    on_path: dict[str, int] = {start: 0}
    path: list[_Edge] = []
    stack: list[Iterator[_Edge]] = [_bad_edges(start, rules, nodes, productive, consuming)]
    finished: set[str] = set()
    while stack:
        edge = next(stack[-1], None)
        if edge is None:
            stack.pop()
            left = path.pop().target if path else start
            on_path.pop(left, None)
            finished.add(left)
            continue
        if edge.target in on_path:
            return [*path, edge], on_path[edge.target]
        if edge.target in finished:
            continue
        on_path[edge.target] = len(path) + 1
        path.append(edge)
        stack.append(_bad_edges(edge.target, rules, nodes, productive, consuming))
    return None


def _bad_edges(
    pointer: str, rules: dict[str, list[list[_Edge]]], nodes: dict[str, Any], productive: set[str], consuming: bool
) -> Iterator[_Edge]:
    for edges in rules.get(pointer, []):
        for edge in edges:
            if edge.target in nodes and edge.target not in productive and (consuming or not edge.consumes):
                yield edge


def _show(pointer: str) -> str:
    return f"#{pointer}" if pointer else "#"

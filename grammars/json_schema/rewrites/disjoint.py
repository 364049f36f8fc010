"""When ``oneOf`` means ``anyOf``: no instance can hold for two of its branches.

``one_of_disjoint(branches, root, parent)`` proves it pair by pair; a pair is disjoint by
any of:

- **types**: both branches declare a ``type`` (directly, through ``const``/``enum`` values,
  or in the subschema a bare ``$ref`` names) and the two type sets do not meet
  (``integer`` meets ``number``);
- **values**: both list their values (``const``/``enum``) and share none, or one lists values
  none of which has the other's declared type;
- **names**: one branch requires a property the other forbids (``"name": false``, or absent
  from a branch with ``additionalProperties: false`` and no ``patternProperties``);
- **discriminator**: both require a property whose ``const``/``enum`` values differ.

``required`` speaks only about objects, so the last two need one of the branches, or the
``parent`` subschema the ``oneOf`` sits in, to admit objects only. Only what the client wrote is
evidence (call it with the client's branches and root): a branch narrowed later (strict
mode) may be disjoint where the client's is not.

Pure: imports neither torch, sglang, fastapi nor a grammar library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grammars.json_schema.canonical import _JSON_TYPES, deref, json_equal
from grammars.json_schema.keywords import _NEUTRAL

__all__ = ["one_of_disjoint"]

_OBJECTS = frozenset({"object"})


@dataclass(frozen=True)
class _Facts:
    """What every instance of one branch has: its types (None: not declared), its values
    (None: not listed), and for objects the names it requires and the names it forbids."""

    types: frozenset[str] | None
    values: list[Any] | None
    required: frozenset[str]
    props: dict[str, Any]
    closed: bool

    def forbids(self, name: str) -> bool:
        return self.props.get(name) is False or (self.closed and name not in self.props)

    def finite(self, name: str) -> list[Any] | None:
        return _listed(self.props.get(name))


def one_of_disjoint(branches: Any, root: Any, parent: Any = None) -> bool:
    """True when at most one of ``branches`` holds for any instance that ``parent``'s
    ``type`` admits (``parent``: the subschema holding the ``oneOf``, or None)."""
    if not isinstance(branches, list) or not branches:
        return False
    facts = [_facts(b, root) for b in branches]
    if any(f is None for f in facts):
        return False
    objects = _types(parent) == _OBJECTS if isinstance(parent, dict) else False
    known = [f for f in facts if f is not None]
    return all(_pair(a, b, objects) for i, a in enumerate(known) for b in known[i + 1 :])


def _facts(branch: Any, root: Any) -> _Facts | None:
    if not isinstance(branch, dict):
        return None
    if "$ref" in branch and all(k == "$ref" or k in _NEUTRAL for k in branch):
        branch = deref(branch, root)
        if not isinstance(branch, dict) or "$ref" in branch:
            return None
    values = _listed(branch)
    types = _types(branch)
    if types is None and values is not None:
        types = frozenset(_type_of(v) for v in values)
    props = branch.get("properties", {})
    required = branch.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        return None
    closed = branch.get("additionalProperties") is False and "patternProperties" not in branch
    names = frozenset(n for n in required if isinstance(n, str))
    return _Facts(types, values, names, props, closed)


def _pair(a: _Facts, b: _Facts, objects: bool) -> bool:
    if a.types is not None and b.types is not None and not (_widened(a.types) & _widened(b.types)):
        return True
    if a.values is not None and b.values is not None:
        return not any(json_equal(x, y) for x in a.values for y in b.values)
    if not (objects or a.types == _OBJECTS or b.types == _OBJECTS):
        return False
    if any(b.forbids(n) for n in a.required) or any(a.forbids(n) for n in b.required):
        return True
    return any(_differ(a.finite(n), b.finite(n)) for n in a.required & b.required)


def _differ(x: list[Any] | None, y: list[Any] | None) -> bool:
    return x is not None and y is not None and not any(json_equal(v, w) for v in x for w in y)


def _listed(schema: Any) -> list[Any] | None:
    if not isinstance(schema, dict):
        return None
    listed = [schema["const"]] if "const" in schema else schema.get("enum")
    return listed if isinstance(listed, list) and listed else None


def _types(schema: dict[str, Any]) -> frozenset[str] | None:
    raw = schema.get("type")
    raw = [raw] if isinstance(raw, str) else raw
    if isinstance(raw, list) and raw and all(isinstance(t, str) and t in _JSON_TYPES for t in raw):
        return frozenset(raw)
    return None


def _widened(types: frozenset[str]) -> frozenset[str]:
    """``integer`` and ``number`` meet: both stand for ``number`` here."""
    return frozenset("number" if t == "integer" else t for t in types)


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    kinds = {type(None): "null", str: "string", list: "array", dict: "object"}
    return kinds.get(type(value), "object")

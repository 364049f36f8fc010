"""Exact rewrites: keywords neither library enforces, restated with keywords both enforce.

Each rewrite yields a schema that admits no instance the original refuses (at most it
narrows, as strict mode does: no undeclared object members); the policy then judges the
result as usual, and outputs are still validated against the client's original schema.
Bottom-up, on a copy; a subschema with a ``$ref`` into what a rewrite moves is left as it is.

- ``allOf`` of object schemas (``type``/``properties``/``required``/``additionalProperties:
  false``, beside the parent's own): one object schema. A property declared in several parts
  becomes the ``allOf`` of its schemas, merged the same way or left (and refused) as it is.
  An ``additionalProperties: false`` part keeps only its own names.
- ``enum``/``const`` beside other assertions: the values the whole subschema admits
  (``folding.fold_values``, checked with the validator outputs are checked with), nothing else.
- ``oneOf`` whose branches are provably disjoint (``disjoint.one_of_disjoint``, on the
  client's branches: distinct declared types or values, a property one branch requires and
  another forbids, or a required const/enum discriminator): ``anyOf``; also a ``oneOf`` an
  inlined ``$ref`` brings in, when its branches are literally a list the client wrote.
- Assertions beside ``anyOf``/``$ref``/``allOf`` moved into one schema (``combine.py``):
  ``A∧B`` by the object merge below or side by side when no keyword reads the other's.
- ``not`` of a ``type``: the complement type list (``number`` minus ``integer`` is not a type:
  left as it is). ``not`` of a ``const``/``enum`` beside an ``enum``/``const``: those values
  filtered.
- ``required`` names ``properties`` does not declare: declared with the schema JSON Schema
  gives them (``required.py``).
- ``dependentRequired`` over declared properties of a closed object (at most
  ``MAX_DEPENDENT`` trigger names): an ``anyOf`` of the objects with each trigger absent, or
  present with its dependents required; draft 7's ``dependencies`` with name lists the same way.
"""

from __future__ import annotations

import bisect
from typing import Any

from grammars.json_schema.canonical import canonical_json, iter_subschemas, json_copy, json_equal, resolve_pointer
from grammars.json_schema.keywords import _NEUTRAL
from grammars.json_schema.rewrites.combine import distribute_any_of, inline_ref, pattern_into_declared, reduce_all_of
from grammars.json_schema.rewrites.dependent import (
    MAX_DEPENDENT,
    OBJECT_KEYS,
    dependent_required,
    draft7_dependencies,
    mergeable,
)
from grammars.json_schema.rewrites.disjoint import one_of_disjoint
from grammars.json_schema.rewrites.folding import fold_values, lengths_in_pattern
from grammars.json_schema.rewrites.hoist import hoist_ref_targets
from grammars.json_schema.rewrites.required import declare_required

__all__ = ["MAX_DEPENDENT", "rewrite_exact"]

_ROUNDS = 3
_MOVED = ("allOf", "oneOf", "not", "properties", "dependentRequired", "dependencies")  # what a rewrite moves or renames
_INTERACTING = frozenset(
    {"$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "properties", "patternProperties",
     "additionalProperties", "unevaluatedProperties", "items", "prefixItems", "unevaluatedItems",
     "contains", "minContains", "maxContains", "dependentSchemas", "dependentRequired", "dependencies", "$defs",
     "definitions"}
)  # fmt: skip
_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")


def rewrite_exact(schema: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the rewritten copy, ``keyword at /pointer`` per rewrite); ``schema`` itself when
    nothing applies. Never mutates ``schema``. ``$ref`` targets inside other subschemas are
    first copied under ``$defs`` (``hoist.py``), so no rewrite is held back by them."""
    schema, hoisted = hoist_ref_targets(schema)
    targets = _ref_targets(schema)
    nodes = [n for n in iter_subschemas(schema) if isinstance(n.value, dict) and _candidate(n.value)]
    nodes = [n for n in nodes if not any(_any_under(f"{n.pointer}/{k}", targets) for k in _MOVED)]
    if not nodes:
        return schema, hoisted
    out, done = json_copy(schema), list(hoisted)
    client = _client_one_ofs(schema)
    for node in sorted(nodes, key=lambda n: n.depth, reverse=True):  # children first
        done += _rewrite_node(resolve_pointer(out, node.pointer), node.pointer, node.value, schema, (targets, client))
    done += _inlined_one_ofs(out, schema, (targets, client))
    return (out, tuple(done)) if len(done) > len(hoisted) else (schema, hoisted)


def _rewrite_node(
    value: dict[str, Any], pointer: str, original: Any, schema: Any, known: tuple[list[str], frozenset[str]]
) -> list[str]:
    """Rewrite ``value`` (the copy at ``pointer``; ``original`` is the client's) in place.
    ``known``: the ``$ref`` targets, and the client's ``oneOf`` branch lists (canonical text)."""
    where, (targets, client) = pointer or "/", known
    free = _folds(pointer, targets)  # nothing points inside: it may be rebuilt whole
    if free and fold_values(value, schema, pointer):
        return [f"{_folded(original)} at {where}"]
    done = []
    # the client's branches, not the rewritten ones: a merge may have narrowed a branch
    if "oneOf" in value and "anyOf" not in value and one_of_disjoint(original.get("oneOf"), schema, original):
        value["anyOf"] = value.pop("oneOf")
        done.append(f"oneOf at {where}")
    for _ in range(_ROUNDS):  # what one step brings together, the next may restate
        before = len(done)
        if free and "$ref" in value and inline_ref(value, schema, _merge):
            done.append(f"$ref at {where}")
        if "oneOf" in value and "anyOf" not in value and _client_disjoint(value, schema, client):
            value["anyOf"] = value.pop("oneOf")  # brought in by a $ref, as the client wrote it
            done.append(f"oneOf at {where}")
        for keyword, step in _STEPS:
            if keyword in value and step(value):
                done.append(f"{keyword} at {where}")
        if free and "allOf" in value and reduce_all_of(value, _merge):
            done.append(f"allOf at {where}")
        if free and "anyOf" in value and distribute_any_of(value, _merge):
            done.append(f"anyOf at {where}")
        if free and "patternProperties" in value and pattern_into_declared(value, _merge):
            done.append(f"patternProperties at {where}")
        if "pattern" in value and lengths_in_pattern(value):
            done.append(f"pattern at {where}")
        if len(done) == before:
            break
    return done


def _inlined_one_ofs(out: dict[str, Any], schema: Any, known: tuple[list[str], frozenset[str]]) -> list[str]:
    """A client-written ``oneOf`` deep inside what an inlined ``$ref`` brought: ``anyOf`` when
    disjoint, then the node's siblings restated as for any node."""
    done = []
    for node in list(iter_subschemas(out)):
        value = node.value
        if not isinstance(value, dict) or "oneOf" not in value or "anyOf" in value:
            continue
        if not _folds(node.pointer, known[0]) or not _client_disjoint(value, schema, known[1]):
            continue
        value["anyOf"] = value.pop("oneOf")
        done += [f"oneOf at {node.pointer or '/'}", *_rewrite_node(value, node.pointer, {}, schema, known)]
    return done


def _client_one_ofs(schema: dict[str, Any]) -> frozenset[str]:
    lists = (n.value.get("oneOf") for n in iter_subschemas(schema) if isinstance(n.value, dict))
    return frozenset(canonical_json(b) for b in lists if isinstance(b, list))


def _client_disjoint(value: dict[str, Any], schema: Any, client: frozenset[str]) -> bool:
    """The ``oneOf`` is one the client wrote (not narrowed by a rewrite) and provably disjoint."""
    return canonical_json(value["oneOf"]) in client and one_of_disjoint(value["oneOf"], schema, value)


def _candidate(value: dict[str, Any]) -> bool:
    keys = ("enum", "const", "$ref", "anyOf", "oneOf", "patternProperties", "pattern", *(k for k, _ in _STEPS))
    return any(k in value for k in keys)


def _folded(original: dict[str, Any]) -> str:
    return "const" if "const" in original else "enum" if "enum" in original else "allOf"


def _folds(pointer: str, targets: list[str]) -> bool:
    """A folded subschema is replaced whole: no ``$ref`` may point inside it."""
    return not _any_under(f"{pointer}/", targets)


def _any_under(prefix: str, targets: list[str]) -> bool:
    """Whether a target starts with ``prefix`` (``targets`` sorted: the first string not below
    ``prefix`` is the only candidate)."""
    i = bisect.bisect_left(targets, prefix)
    return i < len(targets) and targets[i].startswith(prefix)


def _ref_targets(schema: dict[str, Any]) -> list[str]:
    """The local ``$ref`` targets (pointers), sorted for ``_any_under``."""
    out = []
    for node in iter_subschemas(schema):
        ref = node.value.get("$ref") if isinstance(node.value, dict) else None
        if isinstance(ref, str) and ref.startswith("#"):
            out.append(ref[1:])
    return sorted(out)


def merge_all_of(value: dict[str, Any]) -> bool:
    """Replace ``value``'s ``allOf`` (and its own object keywords) by one object schema."""
    branches = value.get("allOf")
    if not isinstance(branches, list) or not branches:
        return False
    own = {k: v for k, v in value.items() if k in OBJECT_KEYS}
    if any(k not in OBJECT_KEYS and k not in _NEUTRAL for k in value if k != "allOf"):
        return False
    merged = _merge([own, *branches])
    if merged is None:
        return False
    for key in OBJECT_KEYS | {"allOf"}:
        value.pop(key, None)
    value.update(merged)
    return True


def _merge(parts: list[Any]) -> dict[str, Any] | None:
    """One object schema admitting only what every part admits, or None."""
    if not all(isinstance(p, dict) and mergeable(p) for p in parts):
        return None
    props: dict[str, Any] = {}
    for part in parts:
        for name, sub in part.get("properties", {}).items():
            props[name] = sub if name not in props else _both(props[name], sub)
            if props[name] is None:
                return None
    closed = [set(p.get("properties", {})) for p in parts if p.get("additionalProperties") is False]
    allowed = set.intersection(*closed) if closed else set(props)
    required = list(dict.fromkeys(n for p in parts for n in p.get("required", [])))
    if any(n not in allowed for n in required):
        return None  # unsatisfiable as merged: left to the policy as it is
    out: dict[str, Any] = {}
    if props or closed:
        out["properties"] = {n: s for n, s in props.items() if n in allowed}
    if any(p.get("type") == "object" for p in parts) or closed:
        out["type"] = "object"
    if required:
        out["required"] = required
    if closed:
        out["additionalProperties"] = False
    return out


def _both(a: Any, b: Any) -> Any:
    """The schema of a property two parts declare: one when equal, the union of their
    keywords when no keyword of one reads a sibling of the other, else their merge."""
    if json_equal(a, b):
        return a
    if isinstance(a, dict) and isinstance(b, dict) and _independent(a, b):
        return {**a, **b}
    both: dict[str, Any] = {"allOf": [a, b]}
    return both if merge_all_of(both) else None


def _independent(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``{**a, **b}`` means ``allOf: [a, b]``: shared keywords are equal and none of them
    depends on its siblings."""
    keys = set(a) | set(b)
    return not keys & _INTERACTING and all(json_equal(a[k], b[k]) for k in set(a) & set(b))


def negated(value: dict[str, Any]) -> bool:
    """``not`` of a type (complement type list) or of values (filtered sibling enum)."""
    inner = value.get("not")
    if not isinstance(inner, dict) or any(k not in _NEUTRAL for k in inner if k not in ("type", "const", "enum")):
        return False
    if set(inner) - _NEUTRAL == {"type"}:
        return _not_type(value, inner["type"])
    if len(set(inner) - _NEUTRAL) == 1:
        return _not_values(value, [inner["const"]] if "const" in inner else inner.get("enum"))
    return False


def _not_type(value: dict[str, Any], raw: Any) -> bool:
    excluded = {raw} if isinstance(raw, str) else set(raw) if isinstance(raw, list) else None
    own = value.get("type", list(_TYPES))
    have = [own] if isinstance(own, str) else list(own) if isinstance(own, list) else None
    if excluded is None or have is None or not excluded <= set(_TYPES):
        return False
    if "number" in excluded:
        excluded.add("integer")
    keep = [t for t in have if t not in excluded]
    if not keep or ("integer" in excluded and "number" in keep):
        return False  # nothing left, or "number but not integer": not a type
    value.pop("not")
    value["type"] = keep[0] if len(keep) == 1 else keep
    return True


def _not_values(value: dict[str, Any], bad: Any) -> bool:
    own = [value["const"]] if "const" in value else value.get("enum")
    if not isinstance(bad, list) or not isinstance(own, list):
        return False
    keep = [v for v in own if not any(json_equal(v, b) for b in bad)]
    if not keep:
        return False
    value.pop("not")
    value.pop("const", None)
    value["enum"] = keep
    return True


_STEPS = (
    ("allOf", merge_all_of),
    ("not", negated),
    ("dependentRequired", dependent_required),
    ("dependencies", draft7_dependencies),
    ("required", declare_required),
)

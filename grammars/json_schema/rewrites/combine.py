"""Exact rewrites that move assertions next to an applicator into one schema (``rewrite.py`` runs
them). xgrammar drops every sibling of ``anyOf``/``$ref``/``allOf``; in Draft 2020-12 a
subschema means all of its keywords, so:

- ``distribute_any_of``: ``{A, "anyOf": [B1, ..., Bn]}`` -> ``{"anyOf": [A∧B1, ..., A∧Bn]}``;
- ``inline_ref``: ``{"$ref": R, A}`` -> ``T∧A`` with ``T`` the subschema ``R`` names (its
  ``$ref``s, absolute pointers, still resolve in place: nothing is moved);
- ``reduce_all_of``: ``{A, "allOf": [B1, ..., Bn]}`` -> ``A∧B1∧...∧Bn``;
- ``pattern_into_declared``: a declared property whose name a ``patternProperties`` regex
  matches must hold both schemas: its schema becomes ``P∧S`` (xgrammar checks a declared name
  against its property schema only).

``A∧B`` (``combine``) is the object merge of ``rewrite.py`` when both are plain object schemas,
else ``{**A, **B}`` when that means the same as ``allOf: [A, B]``: keywords both hold are
equal (``type``: the types both admit, ``integer`` within ``number``), and no keyword reads
a sibling the other part brings (``additionalProperties`` reads ``properties``/
``patternProperties``, ``items`` reads ``prefixItems``, ...; ``unevaluated*`` read
everything). Anything else: left as it is (and refused by the policy). A subschema a
``$ref`` points inside is never rewritten here (``rewrite.py``).

Pure: imports neither torch, sglang, fastapi nor a grammar library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grammars.json_schema.canonical import json_equal, resolve_pointer
from grammars.json_schema.keywords import _NEUTRAL

__all__ = ["combine", "distribute_any_of", "inline_ref", "pattern_into_declared", "reduce_all_of"]

_READS: dict[str, frozenset[str]] = {
    "additionalProperties": frozenset({"properties", "patternProperties"}),
    "items": frozenset({"prefixItems"}),
    "additionalItems": frozenset({"items", "prefixItems"}),
    "minContains": frozenset({"contains"}),
    "maxContains": frozenset({"contains"}),
    "then": frozenset({"if"}),
    "else": frozenset({"if"}),
    "if": frozenset({"then", "else"}),
}
_READS_ALL = frozenset({"unevaluatedProperties", "unevaluatedItems"})

Merge = Callable[[list[Any]], "dict[str, Any] | None"]


def assertions(value: dict[str, Any], *, but: str = "") -> dict[str, Any]:
    """``value``'s keywords that are not annotations or containers (nor ``but``)."""
    return {k: v for k, v in value.items() if k not in _NEUTRAL and k != but}


def combine(a: Any, b: Any, merge: Merge) -> dict[str, Any] | None:
    """One schema meaning ``allOf: [a, b]``, or None."""
    if a is True or a == {}:
        return dict(b) if isinstance(b, dict) else None
    if b is True or b == {}:
        return dict(a) if isinstance(a, dict) else None
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    merged = merge([a, b])
    if merged is not None:
        return merged
    types = _types_meet(a.get("type"), b.get("type"))
    if types is None or not _side_by_side(a, b):
        return None
    return {**a, **b, **({"type": types} if types else {})}


def _types_meet(a: Any, b: Any) -> Any:
    """The ``type`` of both: ``[]`` when neither declares one, None when they share none."""
    if a is None and b is None:
        return []
    if a is None or b is None:
        return b if a is None else a
    mine, theirs = _type_list(a), _type_list(b)
    if mine is None or theirs is None:
        return None
    both = [t for t in mine if t in theirs or (t == "integer" and "number" in theirs)]
    both += [t for t in theirs if t == "integer" and "number" in mine and t not in both]
    if not both:
        return None
    return both[0] if len(both) == 1 else both


def _type_list(raw: Any) -> list[str] | None:
    types = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else None
    return types if types and all(isinstance(t, str) for t in types) else None


def _side_by_side(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if any(k in _NEUTRAL for k in (*a, *b)):
        return False
    if any(not json_equal(a[k], b[k]) for k in set(a) & set(b) if k != "type"):
        return False
    if (set(a) | set(b)) & _READS_ALL:
        return False
    for own, other in ((a, b), (b, a)):
        brought = set(other) - set(own)
        if any(_READS.get(k, frozenset()) & brought for k in own):
            return False
    return True


def _restate(value: dict[str, Any], result: dict[str, Any]) -> None:
    """``value``'s assertions replaced by ``result`` (its annotations and containers kept)."""
    for key in assertions(value):
        del value[key]
    value.update(result)


def distribute_any_of(value: dict[str, Any], merge: Merge) -> bool:
    """``{A, anyOf: [B...]}`` -> ``{anyOf: [A∧B...]}``."""
    branches, own = value.get("anyOf"), assertions(value, but="anyOf")
    if not own or not isinstance(branches, list) or not branches:
        return False
    combined = [combine(own, b, merge) for b in branches]
    if any(c is None for c in combined):
        return False
    for key in own:
        del value[key]
    value["anyOf"] = combined
    return True


def reduce_all_of(value: dict[str, Any], merge: Merge) -> bool:
    """``{A, allOf: [B...]}`` -> ``A∧B∧...``."""
    branches = value.get("allOf")
    if not isinstance(branches, list) or not branches:
        return False
    result: Any = assertions(value, but="allOf")
    for branch in branches:
        part = assertions(branch) if isinstance(branch, dict) else branch
        result = combine(result, part, merge)
        if result is None:
            return False
    _restate(value, result)
    return True


def inline_ref(value: dict[str, Any], root: Any, merge: Merge) -> bool:
    """``{$ref: R, A}`` -> ``T∧A`` (``T`` read from the client's ``root``)."""
    ref, own = value.get("$ref"), assertions(value, but="$ref")
    if not own or not isinstance(ref, str) or not ref.startswith("#/"):
        return False
    try:
        target = resolve_pointer(root, ref[1:])
    except (KeyError, ValueError):
        return False
    if not isinstance(target, dict) or "$id" in target or "$anchor" in target:
        return False
    result = combine(assertions(target), own, merge)
    if result is None:
        return False
    _restate(value, result)
    return True


def pattern_into_declared(value: dict[str, Any], merge: Merge) -> bool:
    """Each declared property a ``patternProperties`` regex matches: ``P`` -> ``P∧S``."""
    from grammars.json_schema.patterns import PatternError, search

    props, patterns = value.get("properties"), value.get("patternProperties")
    if not isinstance(props, dict) or not isinstance(patterns, dict):
        return False
    changed = False
    for pattern, extra in patterns.items():
        for name in list(props):
            try:
                if not search(pattern, name):
                    continue
            except PatternError:
                return changed  # the policy refuses the pattern
            both = combine(props[name], assertions(extra) if isinstance(extra, dict) else extra, merge)
            if both is not None and both != props[name]:
                props[name], changed = both, True
    return changed

"""``one_of_disjoint``: the one proof that a ``oneOf`` means ``anyOf`` (ms, jsonschema only).

Every pair it calls disjoint is checked against the validator over a bounded domain (objects
over the names the branches use, and one value of each JSON type): no instance the parent
admits holds for two branches. The pairs it may not call disjoint have a witness in the domain.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from grammars.json_schema.rewrites.disjoint import one_of_disjoint

I, N, S, O = ({"type": t} for t in ("integer", "number", "string", "object"))
DEFS = {"$defs": {"i": I, "o": {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}}}
LEAVES: list[Any] = ["x", 0, 1, 1.5, True, None, [1], "a", "b"]


def closed(*names: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"properties": {n: {} for n in names}, "required": list(required), "additionalProperties": False}


# (branches, parent, disjoint)
CASES: list[tuple[list[Any], dict[str, Any] | None, bool]] = [
    ([I, S, {"type": ["null", "boolean"]}], None, True),
    ([I, N], None, False),
    ([{"enum": [1, "a"]}, {"enum": [1.0]}], None, False),
    ([{"enum": [1, "a"]}, {"const": True}, S], None, False),  # "a" is a string
    ([{"enum": [1]}, {"const": True}, {"type": "array"}], None, True),
    ([O, S], None, True),
    ([{"type": "array", "items": I}, S], None, True),  # declared types, whatever else they say
    ([{"$ref": "#/$defs/i"}, S], None, True),  # through the $ref
    ([{"$ref": "#/$defs/i", "minimum": 0}, {"type": "integer"}], None, False),
    # a discriminator: a required property with different const/enum values
    ([{"$ref": "#/$defs/o"}, {"type": "object", "properties": {"k": {"enum": [2, 3]}}, "required": ["k"]}], None, True),
    ([{"properties": {"k": {"const": 1}}, "required": ["k"]}, {"properties": {"k": {"const": 2}}, "required": ["k"]}],
     None, False),  # "x" holds for both: required speaks of objects only
    ([{"properties": {"k": {"const": 1}}, "required": ["k"]}, {"properties": {"k": {"const": 2}}, "required": ["k"]}],
     O, True),  # ... unless the parent admits objects only
    # names: one branch requires what another forbids
    ([closed("a", required=("a",)), closed("b", required=("b",))], O, True),
    ([closed("a", required=("a",)), closed("b", required=("b",))], None, False),  # "x" holds for both
    ([{**closed("a", required=("a",)), "type": "object"}, closed("b", required=("b",))], None, True),
    ([closed("a", "b", required=("a",)), {"required": ["b"]}], O, False),  # {"a", "b"} holds for both
    ([{"required": ["a"]}, {"required": ["b"]}], O, False),  # open: {"a", "b"} holds for both
    ([{"required": ["a"]}, {"properties": {"a": False}}], O, True),
    ([{"required": ["a"]}, {**closed("b"), "patternProperties": {"^a": {}}}], O, False),  # "a" matches the pattern
    ([closed("a", required=("a",)), closed("b", "a", required=("b",)), {"required": ["a"]}], O, False),
]  # fmt: skip


def _domain(branches: list[Any]) -> list[Any]:
    names = sorted(
        {n for b in branches if isinstance(b, dict) for n in [*b.get("properties", {}), *b.get("required", [])]}
    )
    names += ["k", "z"]
    objects = [
        {n: v for n, v in zip(names, combo) if v is not None}
        for combo in itertools.product([None, "x", 1, 2], repeat=len(names))
    ]
    return [*LEAVES, *objects]


@pytest.mark.parametrize(("branches", "parent", "disjoint"), CASES)
def test_disjoint_branches_never_hold_together(branches: list[Any], parent: Any, disjoint: bool) -> None:
    assert one_of_disjoint(branches, DEFS, parent) is disjoint
    validators = [Draft202012Validator({**DEFS, **b}) for b in branches]
    outer = Draft202012Validator(parent or {})
    both = [i for i in _domain(branches) if outer.is_valid(i) and sum(v.is_valid(i) for v in validators) > 1]
    if disjoint:
        assert not both, f"{both[:3]} hold for two branches"


@pytest.mark.parametrize(("branches", "parent", "disjoint"), [c for c in CASES if not c[2]])
def test_what_is_not_called_disjoint_has_a_witness(branches: list[Any], parent: Any, disjoint: bool) -> None:
    """The pairs not called disjoint are not disjoint: an instance holds for two branches."""
    validators = [Draft202012Validator({**DEFS, **b}) for b in branches]
    outer = Draft202012Validator(parent or {})
    assert any(outer.is_valid(i) and sum(v.is_valid(i) for v in validators) > 1 for i in _domain(branches))


def test_not_a_list_or_empty_is_not_disjoint() -> None:
    assert not one_of_disjoint(None, {}) and not one_of_disjoint([], {}) and not one_of_disjoint([True, S], {})

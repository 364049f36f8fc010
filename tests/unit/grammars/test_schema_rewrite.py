"""The exact rewrites at the schema level (jsonschema only, milliseconds): over a bounded
domain, the rewritten schema admits no instance the original refuses, and refuses no
instance the original admits within strict mode's narrowing; the forms that cannot be
restated exactly are left alone (and refused by the policy). The token-matcher proof is
tests/grammars/test_schema_rewrites.py."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from grammars.compile import strict_schema
from grammars.errors import UnsupportedKeywordError
from grammars.json_schema import check_schema
from grammars.json_schema.rewrites.rewrite import rewrite_exact
from tests.grammars.test_schema_rewrites import CASES, _domain


@pytest.mark.parametrize("name", list(CASES))
def test_the_rewrite_is_exact_over_the_domain(name) -> None:
    original = CASES[name]
    rewritten, done = rewrite_exact(original)
    assert done and rewritten is not original
    before, after = Draft202012Validator(original), Draft202012Validator(rewritten)
    narrowed = Draft202012Validator(strict_schema(rewritten))
    admitted = 0
    for instance in _domain(original):
        if after.is_valid(instance):
            admitted += 1
            assert before.is_valid(instance), f"admits invalid {instance}"
        elif before.is_valid(instance):
            assert not narrowed.is_valid(instance), f"refuses valid {instance}"
    assert admitted >= 2


def test_the_policy_serves_what_it_refused_before() -> None:
    for schema in CASES.values():
        assert check_schema(schema).rewritten


@pytest.mark.parametrize(
    "schema",
    [
        {
            "allOf": [
                {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
                {"properties": {"b": {}}},
            ]
        },
        {"allOf": [{"type": "string", "maxLength": 3}, {"maxLength": 2}]},
        {"type": "integer", "anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"allOf": [{"type": "array", "prefixItems": [{"type": "string"}]}, {"items": {"type": "integer"}}]},
        {"type": "string", "pattern": "^[a-f]{2,5}$", "minLength": 3},
        {"type": "string", "pattern": "[a-f]{3}", "maxLength": 3},
        {"type": "string", "pattern": "^a$|^bb$", "maxLength": 1},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "object", "properties": {"a": {}}, "additionalProperties": True, "dependentRequired": {"a": ["b"]}},
        {"type": "object", "properties": {"a": {}}, "dependentRequired": {"a": ["undeclared"]}},
        {"not": {"const": 1}},
        {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        {"oneOf": [{"type": "string"}, {"minLength": 1}]},
        {"oneOf": [{"$ref": "#/$defs/s"}, {"type": ["null", "string"]}], "$defs": {"s": {"type": "string"}}},
        {"type": "string", "const": 1},
    ],
)
def test_what_cannot_be_restated_exactly_is_left_and_refused(schema) -> None:
    assert rewrite_exact(schema) == (schema, ())
    with pytest.raises(UnsupportedKeywordError):
        check_schema(schema)


def test_a_ref_into_a_rewritten_part_points_at_its_copy() -> None:
    """The target is copied under ``$defs`` first (``hoist.py``), so the part merges."""
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/allOf/0/properties/a"}},
        "allOf": [{"properties": {"a": {"type": "string"}}}],
    }
    rewritten, done = rewrite_exact(schema)
    assert rewritten == {
        "$defs": {"ref:allOf.0.properties.a": {"type": "string"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/ref:allOf.0.properties.a"}, "a": {"type": "string"}},
    }
    assert done == ("$ref at /properties/x", "allOf at /")


def test_empty_parts_merge_into_any_value_not_into_an_object() -> None:
    """``allOf: [{}, {}]`` admits every value: the merge must not imply an object."""
    assert rewrite_exact({"allOf": [{}, {}]}) == ({}, ("allOf at /",))
    assert rewrite_exact({"allOf": [{"description": "d"}]}) == ({}, ("allOf at /",))


def test_disjoint_types_are_read_from_the_client_branches() -> None:
    """The merged ``allOf`` branch declares ``object`` (strict narrowing), but the client's
    branch admits every non-object: ``"x"`` holds for both branches, so oneOf refuses it and
    the branches are not disjoint: refused, not served as anyOf."""
    schema = {"oneOf": [{"allOf": [{"additionalProperties": False}]}, {"type": "string"}]}
    assert not Draft202012Validator(schema).is_valid("x")
    with pytest.raises(UnsupportedKeywordError):
        check_schema(schema)


def test_a_declared_name_a_pattern_matches_takes_both_schemas() -> None:
    from tests.grammars.test_schema_rewrites import PATTERN_OVER_DECLARED

    rewritten, done = rewrite_exact(PATTERN_OVER_DECLARED)
    assert done == ("patternProperties at /",)
    assert rewritten["properties"]["ab"] == {"type": "integer"}
    before, after = Draft202012Validator(PATTERN_OVER_DECLARED), Draft202012Validator(rewritten)
    for instance in _domain(PATTERN_OVER_DECLARED):
        assert before.is_valid(instance) == after.is_valid(instance), instance


def test_lengths_a_pattern_implies_are_dropped_and_nothing_else() -> None:
    schema = {"type": "string", "pattern": "^[0-9a-f]{4}-([0-9a-f]{2}:){2}$", "minLength": 1, "maxLength": 11}
    rewritten, done = rewrite_exact(schema)
    assert done == ("pattern at /",) and set(rewritten) == {"type", "pattern"}
    before, after = Draft202012Validator(schema), Draft202012Validator(rewritten)
    for text in ["", "abcd-12:34:", "abcd-12:34", "abcd-12:34:x", "0000-00:00:", "zzzz-12:34:", "x" * 11, "a" * 12]:
        assert before.is_valid(text) == after.is_valid(text), text


def test_a_required_name_a_pattern_matches_takes_the_pattern_not_additional_properties() -> None:
    """``c1`` matches ``^c``: its value is held to the pattern's schema only; ``z`` matches no
    pattern: ``additionalProperties``. Both declared, exactly (every instance over the names)."""
    schema = {
        "type": "object",
        "patternProperties": {"^c": {"type": "string"}},
        "required": ["c1", "z"],
        "additionalProperties": {"type": "integer"},
    }
    checked = check_schema(schema)
    assert checked.rewritten
    before, after = Draft202012Validator(schema), Draft202012Validator(json.loads(checked.canonical))
    values = [None, "x", 1, 1.5, True, [], {}]
    domain = [{"c1": a, "z": b} for a in values for b in values] + [{"c1": "x"}, {"z": 1}, {}, "x"]
    assert [before.is_valid(i) for i in domain] == [after.is_valid(i) for i in domain]
    assert sum(after.is_valid(i) for i in domain) == 1


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "required": ["a"], "additionalProperties": False},
        {"type": "object", "required": ["a"], "unevaluatedProperties": {"type": "integer"}},
    ],
)
def test_required_names_that_cannot_be_declared_exactly_are_left(schema) -> None:
    assert rewrite_exact(schema) == (schema, ())


def test_a_one_of_a_ref_brings_in_is_read_as_the_client_wrote_it() -> None:
    """``x``'s ``$ref`` beside ``type`` is inlined: the ``oneOf`` it brings is the client's
    (``$defs/t``), proven disjoint there, so it becomes ``anyOf`` in place too; exact."""
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/t", "type": ["string", "null"]}},
        "$defs": {"t": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]}},
    }
    checked = check_schema(schema)
    assert "oneOf at /properties/x" in checked.rewritten
    before, after = Draft202012Validator(schema), Draft202012Validator(json.loads(checked.canonical))
    domain = [{"x": v} for v in [None, "", "ab", "abc", 1, True, [], {}]] + [{}]
    assert [before.is_valid(i) for i in domain] == [after.is_valid(i) for i in domain]


def test_a_one_of_deep_inside_an_inlined_ref_is_read_as_the_client_wrote_it() -> None:
    """``items``' ``$ref`` beside ``type`` is inlined whole: the ``oneOf`` under its ``at``
    property sits at a pointer the client never wrote; its branches are the client's, so it
    becomes ``anyOf`` there too; exact."""
    schema = {
        "type": "array",
        "items": {"$ref": "#/$defs/link", "type": "object"},
        "$defs": {
            "link": {"type": "object", "properties": {"at": {"oneOf": [{"$ref": "#/$defs/day"}, {"type": "null"}]}}},
            "day": {"type": "string", "maxLength": 2},
        },
    }
    checked = check_schema(schema)
    assert "oneOf at /items/properties/at" in checked.rewritten
    before, after = Draft202012Validator(schema), Draft202012Validator(json.loads(checked.canonical))
    domain = [[{"at": v}] for v in [None, "", "ab", "abc", 1, True, [], {}]] + [[{}], [1], []]
    assert [before.is_valid(i) for i in domain] == [after.is_valid(i) for i in domain]

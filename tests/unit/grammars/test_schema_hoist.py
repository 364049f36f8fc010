"""``$ref`` targets inside other subschemas are copied under ``$defs`` before the rewrites
(``grammars/json_schema/rewrites/hoist.py``): exact, and no rewrite or loosening leaves a
``$ref`` dangling."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from grammars.json_schema import check_schema
from grammars.json_schema.rewrites.hoist import hoist_ref_targets

I = {"type": "integer"}


def test_a_ref_through_an_array_is_served_through_its_copy() -> None:
    schema = {"prefixItems": [I], "properties": {"x": {"$ref": "#/prefixItems/0"}}}
    canonical = json.loads(check_schema(schema).canonical)
    assert canonical["properties"]["x"] == {"$ref": "#/$defs/ref:prefixItems.0"}
    assert canonical["$defs"]["ref:prefixItems.0"] == I and schema["properties"]["x"]["$ref"] == "#/prefixItems/0"


def test_loosening_a_keyword_that_holds_a_target_leaves_no_dangling_ref() -> None:
    """dependabot.json's shape: ``properties`` beside ``allOf`` (dropped when loosened) holds the
    target of a ``$ref`` elsewhere; the policy refused the loosened schema as dangling."""
    schema = {
        "type": "object",
        "properties": {"prefix": {"type": "string", "maxLength": 5}},
        "allOf": [{"required": ["prefix"]}, {"properties": {"other": {"$ref": "#/properties/prefix"}}}],
    }
    loose = json.loads(check_schema(schema, allow_loosening=True).canonical)
    assert "ref:properties.prefix" in loose["$defs"]


def test_whole_defs_entries_and_escaped_pointers_stay() -> None:
    schema = {"$defs": {"a": I, "b/c": I}, "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"$ref": "#/$defs/b~1c"}}}
    assert hoist_ref_targets(schema) == (schema, ())


def test_hoisting_keeps_every_suite_instance_valid_or_invalid_as_before() -> None:
    """Exactness over the JSON-Schema-Test-Suite (draft2020-12): every schema with a hoisted
    target validates every instance of its cases as the suite says (cases with remote references,
    which need the suite's HTTP server, are left out)."""
    from assets import schema_suite_dir

    hoisted = 0
    for path in sorted(schema_suite_dir().glob("*.json")):
        for case in json.loads(path.read_text()):
            if not isinstance(case["schema"], dict) or "localhost:1234" in json.dumps(case["schema"]):
                continue
            schema, moved = hoist_ref_targets(case["schema"])
            hoisted += bool(moved)
            for test in case["tests"]:
                where = f"{path.name}: {case['description']}: {test['description']}"
                assert Draft202012Validator(schema).is_valid(test["data"]) == test["valid"], where
    assert hoisted >= 2, hoisted


TREE = {  # recursion through a target inside ``properties``
    "type": "object",
    "properties": {
        "node": {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/properties/node"}}, "v": I},
            "required": ["v"],
        }
    },
}
BRANCH = {  # a target inside an ``anyOf`` branch, and one through an array
    "anyOf": [{"type": "string", "maxLength": 2}, {"type": "array", "prefixItems": [I, {"$ref": "#/anyOf/0"}]}],
    "properties": {"s": {"$ref": "#/anyOf/1/prefixItems/1"}},
}
INSTANCES = [
    {}, {"node": {"v": 1}}, {"node": {"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}},
    {"node": {"v": 1, "kids": [{"kids": []}]}}, {"node": {"v": "x"}}, "ab", "abc", [1, "ab"], [1, "abc"],
    [1, 2], {"s": "a"}, {"s": "abc"}, 3,
]  # fmt: skip


def test_hoisting_keeps_validity_on_recursive_and_branch_targets() -> None:
    for schema in (TREE, BRANCH):
        hoisted, moved = hoist_ref_targets(schema)
        assert moved and "$defs" in hoisted and "$defs" not in schema
        for instance in INSTANCES:
            assert Draft202012Validator(hoisted).is_valid(instance) == Draft202012Validator(schema).is_valid(instance)

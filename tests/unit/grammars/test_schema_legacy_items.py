"""Draft-07's array form of ``items`` (``items: [A, B]`` + ``additionalItems``) is restated as
2020-12's ``prefixItems`` + ``items``, for the grammar and for the output validation alike."""

from __future__ import annotations

import copy
import json

import pytest

from grammars.errors import InvalidSchemaError
from grammars.json_schema import check_schema, first_error
from grammars.json_schema.rewrites.legacy import DRAFT_2020_12, legacy_items

TUPLE = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "macro": {
            "type": "array",
            "items": [{"type": "string"}, {"type": "array", "items": [{"type": "integer"}]}],
            "additionalItems": False,
        }
    },
}


def test_the_array_form_is_restated_and_named():
    before = copy.deepcopy(TUPLE)
    checked = check_schema(TUPLE)
    assert TUPLE == before  # never mutates the client's schema
    macro = json.loads(checked.canonical)["properties"]["macro"]
    assert macro["prefixItems"][0] == {"type": "string"} and macro["items"] is False
    assert macro["prefixItems"][1] == {"type": "array", "prefixItems": [{"type": "integer"}]}  # nested, no rest
    assert json.loads(checked.canonical)["$schema"] == DRAFT_2020_12
    assert checked.rewritten == (
        "items at /properties/macro",
        "items at /properties/macro/prefixItems/1",
        "$schema at /",
    )


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ({"macro": ["a", [1]]}, True),
        ({"macro": ["a", [1, "x"]]}, True),  # the inner array has no additionalItems: any rest
        ({"macro": ["a"]}, True),
        ({"macro": [1, [1]]}, False),
        ({"macro": ["a", [1], "extra"]}, False),  # additionalItems: false
        ({"macro": ["a", ["x"]]}, False),
    ],
)
def test_outputs_are_validated_as_the_draft_defines_the_array_form(value, valid):
    assert (first_error(value, TUPLE) is None) is valid


def test_a_node_with_prefix_items_too_is_left_for_the_metaschema():
    schema = {"type": "array", "prefixItems": [{"type": "string"}], "items": [{"type": "integer"}]}
    assert legacy_items(schema) == (schema, ())
    with pytest.raises(InvalidSchemaError):
        check_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}, "additionalItems": False},  # MaskBench's 215
        {"type": "array", "prefixItems": [{"type": "string"}], "additionalItems": False},
        {"type": "array", "additionalItems": {"type": "integer"}},
    ],
)
def test_an_additional_items_that_asserts_nothing_is_removed_and_named(schema):
    """Beside a schema-valued or absent ``items`` no draft applies ``additionalItems``; 2020-12 does
    not define it: the same instances are valid with it and without it."""
    checked = check_schema(schema)
    assert "additionalItems" not in checked.canonical and "additionalItems at /" in checked.rewritten
    assert first_error(["a", "b", "c"], schema) is None or "items" in schema

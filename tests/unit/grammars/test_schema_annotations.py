"""Unknown keywords are annotations (JSON Schema 2020-12): the policy removes them from what
generation sees and names them; known assertion keywords it cannot enforce stay refused.
``schema_verdict`` is the one answer per schema (served / refused, library, ignored, reason)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from grammars.compile import LarkRouter, schema_verdict, strict_schema
from grammars.errors import UnsupportedKeywordError
from grammars.json_schema import check_schema

ANNOTATED = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "id": "https://example.com/person",
    "tlo": "person",
    "type": "object",
    "properties": {
        "id": {"type": "integer", "self": {"href": "/people/{id}"}},
        "name": {"type": "string", "x-order": 1},
        "tags": {"type": "array", "items": {"type": "string", "javaType": "String"}},
        "pet": {"anyOf": [{"type": "string"}, {"type": "null"}], "x-nullable-note": "either"},
    },
    "required": ["id", "name"],
    "additionalProperties": False,
}
NO_TOKENIZER = Path("/nonexistent/tokenizer.json")


def _pairs(checked):
    return [(u.keyword, u.pointer) for u in checked.ignored]


def test_unknown_keywords_are_removed_and_named_with_their_pointer() -> None:
    original = copy.deepcopy(ANNOTATED)
    checked = check_schema(ANNOTATED)
    assert sorted(_pairs(checked)) == [
        ("id", ""),
        ("javaType", "/properties/tags/items"),
        ("self", "/properties/id"),
        ("tlo", ""),
        ("x-nullable-note", "/properties/pet"),
        ("x-order", "/properties/name"),
    ]
    assert ANNOTATED == original  # never mutated
    assert set(checked.schema["properties"]) == {"id", "name", "tags", "pet"}  # a property named id stays
    assert "self" not in checked.canonical and "tlo" not in checked.canonical and "x-order" not in checked.canonical


def test_removing_them_changes_no_verdict_of_the_validator() -> None:
    """What generation enforces (the stripped schema) admits exactly what the client's schema
    admits: jsonschema ignores unknown keywords too."""
    stripped = Draft202012Validator(check_schema(ANNOTATED).schema)
    full = Draft202012Validator(ANNOTATED)
    cases = [
        {"id": 1, "name": "a"},
        {"id": 1, "name": "a", "tags": ["x"], "pet": None},
        {"id": "1", "name": "a"},
        {"id": 1},
        {"id": 1, "name": "a", "extra": 0},
        {"id": 1, "name": "a", "pet": 3},
    ]
    assert [stripped.is_valid(c) for c in cases] == [full.is_valid(c) for c in cases] == [
        True, True, False, False, False, False
    ]  # fmt: skip


def test_the_stripped_schema_reaches_the_llguidance_translation() -> None:
    strict_schema(check_schema(ANNOTATED).schema)  # raised NotExpressible on any unknown keyword
    verdict = schema_verdict(ANNOTATED, router=LarkRouter(NO_TOKENIZER))
    assert (verdict.served, verdict.library, verdict.reason) == (True, "llguidance", None)
    assert "tlo at /" in verdict.ignored and "self at /properties/id" in verdict.ignored


def test_unknown_keywords_beside_applicators_and_inside_property_names_are_ignored() -> None:
    schema = {
        "type": "object",
        "propertyNames": {"pattern": "^[a-z]+$", "x-hint": "lower"},
        "additionalProperties": {"$ref": "#/$defs/v", "x-kind": "ref"},
        "$defs": {"v": {"type": "integer", "x-unit": "cm"}},
    }
    checked = check_schema(schema)
    assert sorted(_pairs(checked)) == [
        ("x-hint", "/propertyNames"),
        ("x-kind", "/additionalProperties"),
        ("x-unit", "/$defs/v"),
    ]


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "x-a": 1}, "uniqueItems"),
        ({"type": "string", "nullable": True, "title2": "t"}, "nullable"),
        ({"type": "object", "properties": {"a": {"not": {"type": "string", "minLength": 2}, "foo": 1}}}, "not"),
    ],
)
def test_known_assertions_stay_refused_and_loosening_keeps_its_meaning(schema, keyword) -> None:
    with pytest.raises(UnsupportedKeywordError) as err:
        check_schema(schema)
    assert [u.keyword for u in err.value.unsupported] == [keyword]
    loose = check_schema(schema, allow_loosening=True)
    assert [u.keyword for u in loose.loosened] == [keyword] and len(loose.ignored) == 1
    refused = schema_verdict(schema, router=LarkRouter(NO_TOKENIZER))
    assert (refused.served, refused.code) == (False, "unsupported_schema_keyword") and keyword in str(refused.reason)


def test_a_ref_into_an_unknown_keyword_is_kept_and_refused_by_name() -> None:
    schema = {"type": "object", "x-defs": {"a": {"type": "string"}}, "properties": {"a": {"$ref": "#/x-defs/a"}}}
    with pytest.raises(UnsupportedKeywordError) as err:
        check_schema(schema)
    assert ("$ref", "/properties/a") in [(u.keyword, u.pointer) for u in err.value.unsupported]


def test_a_schema_without_unknown_keywords_is_returned_as_is() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "description": "d"}}}
    checked = check_schema(schema)
    assert checked.schema is schema and checked.ignored == ()
    assert json.loads(checked.canonical) == schema


FORMATS = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "url"},
        "blob": {"type": "string", "format": "byte"},
        "n": {"type": "integer", "format": "int32"},
        "day": {"type": "string", "format": "date"},
    },
}


def test_a_format_json_schema_does_not_define_is_an_annotation() -> None:
    """No validator asserts an undefined format name (jsonschema's format checker ignores it),
    so removing it changes no verdict, even with formats asserted. A defined name stays."""
    checked = check_schema(FORMATS)
    assert sorted(_pairs(checked)) == [
        ("format", "/properties/blob"),
        ("format", "/properties/n"),
        ("format", "/properties/url"),
    ]
    assert checked.schema["properties"]["day"] == {"type": "string", "format": "date"}
    checker = Draft202012Validator.FORMAT_CHECKER
    full = Draft202012Validator(FORMATS, format_checker=checker)
    stripped = Draft202012Validator(checked.schema, format_checker=checker)
    for value in ["not a url", "%%", "yesterday", 2**40, "2021-02-30", 1.5]:
        for name in FORMATS["properties"]:
            instance = {name: value}
            assert full.is_valid(instance) == stripped.is_valid(instance), instance


@pytest.mark.parametrize("fmt", ["regex", "iri", "idn-email"])
def test_a_defined_format_the_grammar_does_not_enforce_stays_refused(fmt) -> None:
    with pytest.raises(UnsupportedKeywordError):
        check_schema({"type": "string", "format": fmt})

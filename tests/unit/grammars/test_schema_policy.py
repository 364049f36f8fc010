"""The keyword policy, row by row: what is accepted, what is reported where (pure, ms).

Each row mirrors a measured xgrammar 0.2.7 behaviour (grammars/KEYWORDS.md); the
end-to-end evidence is tests/grammars/test_schema_suite.py and test_schema_probes.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grammars.errors import UnsupportedKeywordError
from grammars.json_schema import JSON_OBJECT_SCHEMA, KEYWORDS, SGLANG_FORMATS, check_schema

S, I, N, O, A = ({"type": t} for t in ("string", "integer", "number", "object", "array"))

ACCEPTED: dict[str, dict[str, Any]] = {
    "realistic": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 40},
            "email": {"type": "string", "format": "email"},
            "age": {"type": "integer", "minimum": 0, "exclusiveMaximum": 150},
            "score": {"type": ["number", "null"], "maximum": 1.5},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 5},
            "pair": {"type": "array", "prefixItems": [I, S], "items": False},
            "role": {"type": "string", "enum": ["admin", "user"]},
            "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
            "meta": {
                "type": "object",
                "additionalProperties": {"type": "integer"},
                "maxProperties": 3,
                "propertyNames": {"pattern": "^[a-z]+$"},
            },
        },
        "required": ["name", "email"],
        "additionalProperties": False,
        "title": "User",
        "description": "d",
        "$comment": "c",
        "examples": [{}],
    },
    "typeless object keywords": {"properties": {"a": I}, "required": ["a"], "maxProperties": 1},
    "typeless array keywords": {"items": I, "minItems": 1},
    "anyOf nullable ref": {
        "$defs": {"P": O},
        "type": "object",
        "properties": {"p": {"anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}], "default": None}},
    },
    "allOf single branch": {"allOf": [{"$ref": "#/definitions/x"}], "description": "d", "definitions": {"x": I}},
    "recursive ref": {
        "$defs": {
            "node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
        },
        "$ref": "#/$defs/node",
    },
    "oneOf by type": {"oneOf": [S, I, {"type": ["null", "boolean"]}, {"enum": [[1]]}]},
    "oneOf by discriminator": {
        "oneOf": [
            {"type": "object", "properties": {"k": {"const": "a"}, "v": I}, "required": ["k"]},
            {"type": "object", "properties": {"k": {"enum": ["b", "c"]}}, "required": ["k"]},
        ]
    },
    "const and enum satisfying siblings": {
        "type": "object",
        "properties": {"c": {"type": "string", "const": "x"}, "e": {"type": "integer", "enum": [1, 2], "minimum": 1}},
    },
    "pattern classes are safe": {"type": "string", "pattern": '^[^"\\\\]+\\s[ -~]\\W.[^\\n]$'},
    "patternProperties alone": {"type": "object", "patternProperties": {"^x_.*$": I}, "additionalProperties": False},
    "patternProperties over a declared name it implies": {
        "type": "object",
        "properties": {"ab": {"type": "integer", "minimum": 0}, "c": S},
        "patternProperties": {"^a": {"type": "number"}},
    },
    "minProperties without undeclared keys": {"type": "object", "properties": {"a": I, "b": I}, "minProperties": 1},
    "unevaluated as additional": {"type": "object", "properties": {"a": I}, "unevaluatedProperties": False},
    "annotations": {
        "type": "string",
        "deprecated": True,
        "readOnly": True,
        "writeOnly": False,
        "contentMediaType": "text/plain",
        "$id": "urn:x",
        "$schema": "https://json-schema.org/draft/2020-12/schema",
    },
    "json_object": JSON_OBJECT_SCHEMA,
    "keywords of other types are irrelevant": {
        "type": "object",
        "properties": {
            "i": {"type": "integer", "format": "int32", "pattern": "^x$", "minLength": 3},
            "s": {"type": "string", "minimum": 3, "required": ["zz"], "minProperties": 9},
            "a": {"type": "array", "items": S, "properties": {"x": I}, "minProperties": 1},
        },
    },
    "any value": {},
}

REPORTED: dict[str, tuple[dict[str, Any], list[tuple[str, str]]]] = {
    "ignored keywords": (
        {"type": "array", "items": I, "uniqueItems": True, "contains": I, "minContains": 1},
        [("uniqueItems", ""), ("contains", ""), ("minContains", "")],
    ),
    "not / if / dependent*": (
        {
            "type": "object",
            "properties": {"a": I, "b": I},
            "not": O,
            "if": O,
            "then": O,
            "else": O,
            "dependentRequired": {"a": ["b"]},
        },
        [("not", ""), ("if", ""), ("then", ""), ("else", ""), ("dependentRequired", "")],
    ),
    "allOf with two branches": (
        {"allOf": [{"type": "integer", "minimum": 1}, {"type": "integer", "minimum": 3}]},
        [("allOf", "")],
    ),
    "siblings of anyOf are dropped": (
        {"type": "integer", "minimum": 0, "anyOf": [I, S], "title": "ok"},
        [("type", ""), ("minimum", "")],
    ),
    "siblings of $ref are dropped": (
        {"$defs": {"i": {"type": "integer", "maximum": 5}}, "properties": {"x": {"$ref": "#/$defs/i", "maximum": 3}}},
        [("maximum", "/properties/x")],
    ),
    "two applicators": ({"$defs": {"i": I}, "$ref": "#/$defs/i", "anyOf": [S]}, [("anyOf", "")]),
    "oneOf overlapping": ({"oneOf": [I, N]}, [("oneOf", "")]),
    "oneOf unprovable (object arm)": ({"oneOf": [O, {}]}, [("oneOf", "")]),
    "oneOf ref arm": ({"$defs": {"i": I}, "oneOf": [{"$ref": "#/$defs/i"}, N]}, [("oneOf", "")]),
    "typeless string keywords": (
        {"pattern": "^a$", "minLength": 1, "format": "date"},
        [("pattern", ""), ("format", "")],
    ),
    "typeless numeric keywords": ({"minimum": 1, "exclusiveMaximum": 3}, [("minimum", ""), ("exclusiveMaximum", "")]),
    "typeless uninferred object/array": (
        {"patternProperties": {"^a$": I}, "maxItems": 1},
        [("patternProperties", ""), ("maxItems", "")],
    ),
    "multipleOf (SGLang refuses it)": ({"type": "integer", "multipleOf": 2}, [("multipleOf", "")]),
    "two string groups": (
        {"type": "string", "format": "date", "pattern": "^2", "minLength": 1, "maxLength": 9},
        [("pattern", ""), ("minLength", ""), ("maxLength", "")],
    ),
    "pattern naming a backslash": ({"type": "string", "pattern": "^a\\\\b$"}, [("pattern", "")]),
    "pattern naming a quote": ({"type": "string", "pattern": '^"$'}, [("pattern", "")]),
    "pattern naming a control char": ({"type": "string", "pattern": "^a\\nb\\x09$"}, [("pattern", "")]),
    "pattern lookahead": ({"type": "string", "pattern": "^(?!a)[a-z]$"}, [("pattern", "")]),
    "pattern anchor inside": ({"type": "string", "pattern": "^a|^b"}, [("pattern", "")]),
    "required not declared, none allowed": (
        {"type": "object", "properties": {"a": I}, "required": ["a", "b"], "additionalProperties": False},
        [("required", "")],
    ),
    "two patternProperties": ({"type": "object", "patternProperties": {"^a": I, "^b": I}}, [("patternProperties", "")]),
    "patternProperties over a declared name": (
        {"type": "object", "properties": {"ab": I}, "patternProperties": {"^a.*$": S}},
        [("patternProperties", "")],
    ),
    "propertyNames beside properties": (
        {"type": "object", "properties": {"abc": I}, "propertyNames": {"maxLength": 2}},
        [("propertyNames", "")],
    ),
    "propertyNames content": (
        {"type": "object", "propertyNames": {"anyOf": [{"pattern": "^a$"}], "pattern": "^a", "maxLength": 2}},
        [("anyOf", "/propertyNames"), ("pattern", "/propertyNames"), ("maxLength", "/propertyNames")],
    ),
    "minProperties with additional keys": (
        {"type": "object", "minProperties": 2, "additionalProperties": I},
        [("minProperties", "")],
    ),
    "const violating siblings": ({"type": "string", "const": 1}, [("const", "")]),
    "root ref (token mask bug)": (
        {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}},
        [("$ref", "/properties/next/anyOf/0")],
    ),
    "anchor ref": ({"$defs": {"a": {"$anchor": "foo", "type": "integer"}}, "$ref": "#foo"}, [("$ref", "")]),
    "escaped pointer ref": ({"$defs": {"a/b": I}, "$ref": "#/$defs/a~1b"}, [("$ref", "")]),
    "nested $id": (
        {"type": "object", "properties": {"a": {"$id": "urn:a", "type": "integer"}}},
        [("$id", "/properties/a")],
    ),
    "dynamic refs": ({"$dynamicAnchor": "x", "type": "object"}, [("$dynamicAnchor", "")]),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted(name: str) -> None:
    schema = ACCEPTED[name]
    before = copy.deepcopy(schema)
    checked = check_schema(schema)
    assert checked.loosened == () and schema == before
    # unchanged, restated exactly (rewrite.py), or without annotations the grammar ignores
    assert checked.schema is schema or checked.rewritten or checked.ignored


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported(name: str) -> None:
    schema, expected = REPORTED[name]
    with pytest.raises(UnsupportedKeywordError) as info:
        check_schema(schema)
    assert [(u.keyword, u.pointer) for u in info.value.unsupported] == expected


def test_loosening_drops_exactly_the_reported_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": S, "uniqueItems": True},
            "n": {"type": "integer", "minimum": 0, "anyOf": [I, S]},
            "u": {"oneOf": [I, N]},
        },
        "required": ["tags", "zzz"],
        "additionalProperties": False,
    }
    before = copy.deepcopy(schema)
    checked = check_schema(schema, allow_loosening=True)
    assert schema == before  # never mutates the input
    assert [(u.keyword, u.pointer) for u in checked.loosened] == [
        ("required", ""),
        ("uniqueItems", "/properties/tags"),
        ("type", "/properties/n"),
        ("minimum", "/properties/n"),
        ("oneOf", "/properties/u"),
    ]
    assert checked.schema == {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": S}, "n": {"anyOf": [I, S]}, "u": {"anyOf": [I, N]}},
        "required": ["tags"],
        "additionalProperties": False,
    }
    assert check_schema(checked.schema).canonical == checked.canonical


def test_loosening_without_problems_is_identity() -> None:
    schema = {"type": "object", "properties": {"a": I}}
    checked = check_schema(schema, allow_loosening=True)
    assert checked.schema is schema and checked.loosened == ()


def test_loosening_never_hides_invalid_or_remote() -> None:
    with pytest.raises(Exception) as info:
        check_schema({"type": "objekt", "uniqueItems": True}, allow_loosening=True)
    assert info.value.code == "invalid_schema"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as info:
        check_schema({"$ref": "https://x/y", "uniqueItems": True}, allow_loosening=True)
    assert info.value.code == "remote_ref"  # type: ignore[attr-defined]


def test_keyword_table_is_consistent() -> None:
    statuses = {row.status for row in KEYWORDS.values()}
    assert statuses == {"annotation", "supported", "conditional", "unsupported"}
    samples = {
        "uniqueItems": True,
        "multipleOf": 2,
        "minContains": 1,
        "maxContains": 1,
        "nullable": True,
        "$dynamicRef": "#x",
        "$dynamicAnchor": "x",
        "$recursiveRef": "#",
        "$recursiveAnchor": "x",
    }
    for keyword, row in KEYWORDS.items():
        if row.status == "unsupported":
            with pytest.raises(UnsupportedKeywordError) as info:
                check_schema({"type": "object", keyword: samples.get(keyword, {})})
            assert (info.value.unsupported[0].keyword, info.value.unsupported[0].pointer) == (keyword, "")
    assert len(SGLANG_FORMATS) == 14 and "regex" not in SGLANG_FORMATS


def test_keywords_doc_lists_every_keyword() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "grammars" / "KEYWORDS.md").read_text()
    missing = [k for k in KEYWORDS if f"`{k}`" not in doc]
    assert missing == []

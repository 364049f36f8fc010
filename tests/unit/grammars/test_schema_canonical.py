"""Canonical JSON (the compile cache key), pointers, and the pure analyses (ms)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grammars.json_schema import check_schema
from grammars.json_schema.canonical import (
    canonical_json,
    iter_subschemas,
    json_depth_exceeds,
    json_equal,
    pattern_problem,
    resolve_pointer,
)


def _reversed(value: Any, properties_too: bool, is_properties: bool = False) -> Any:
    """Every object's keys in reverse order; the members of ``properties`` only when
    ``properties_too``."""
    if isinstance(value, dict):
        items = list(value.items())
        if properties_too or not is_properties:
            items.reverse()
        return {k: _reversed(v, properties_too, k == "properties" and not is_properties) for k, v in items}
    if isinstance(value, list):
        return [_reversed(v, properties_too) for v in value]
    return value


SCHEMA = {
    "type": "object",
    "title": "T",
    "properties": {
        "b": {"type": "string", "maxLength": 3.0, "description": "é"},
        "a": {"type": "array", "items": {"enum": [{"y": 1, "x": [2, 1]}, None]}},
    },
    "required": ["b", "a"],
    "$defs": {"z": {"type": "integer"}, "y": {"const": {"q": 1, "p": 2}}},
}


def test_key_order_does_not_matter_but_property_order_does() -> None:
    text = check_schema(SCHEMA).canonical
    assert text == (
        '{"$defs":{"y":{"const":{"p":2,"q":1}},"z":{"type":"integer"}},"properties":{'
        '"b":{"description":"é","maxLength":3,"type":"string"},"a":{"items":{"enum":['
        '{"x":[2,1],"y":1},null]},"type":"array"}},"required":["b","a"],"title":"T",'
        '"type":"object"}'
    )
    assert check_schema(_reversed(SCHEMA, properties_too=False)).canonical == text
    swapped = check_schema(_reversed(SCHEMA, properties_too=True)).canonical
    assert swapped != text and swapped.index('"a":{') < swapped.index('"b":{')
    assert json.loads(text)["properties"]["b"]["maxLength"] == 3  # 2.0-style counts → ints


def test_property_named_properties_is_not_confused_with_the_keyword() -> None:
    schema = {
        "properties": {"properties": {"type": "object", "properties": {"z": {}, "a": {}}}, "enum": {"type": "string"}}
    }
    assert canonical_json(schema) == (
        '{"properties":{"properties":{"properties":{"z":{},"a":{}},"type":"object"},"enum":{"type":"string"}}}'
    )


def test_walk_pointers_and_resolution() -> None:
    schema = {
        "properties": {"a/b": {"items": {"anyOf": [True, {"type": "null"}]}}},
        "enum": [{"properties": {"not": "a schema"}}],
    }
    nodes = [(n.pointer, n.depth) for n in iter_subschemas(schema)]
    assert nodes == [
        ("", 1),
        ("/properties/a~1b", 2),
        ("/properties/a~1b/items", 3),
        ("/properties/a~1b/items/anyOf/0", 4),
        ("/properties/a~1b/items/anyOf/1", 4),
    ]
    assert resolve_pointer(schema, "/properties/a~1b/items/anyOf/1") == {"type": "null"}
    with pytest.raises(KeyError):
        resolve_pointer(schema, "/properties/a~1b/items/anyOf/1", members_only=True)
    assert json_depth_exceeds({"a": [[{"b": 1}]]}, 4) is None
    assert json_depth_exceeds({"a": [[{"b": {}}]]}, 4) == "/a/0/0/b"


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("^[a-z0-9_]{1,20}$", None),
        ('^[^"\\\\]+$', None),
        ("^\\d{3}-\\w+\\s?.$", None),
        ("^(cat|dog)$", None),
        ("^[ -~]+$", None),
        ("^a\\\\b$", "'\\\\'"),
        ('^a"$', "'\"'"),
        ("^\\x5c$", "'\\\\'"),
        ("^\\u0022$", "'\"'"),
        ("^a\\nb$", "'\\n'"),
        ("^[\\t]$", "'\\t'"),
        ("^\\cJ$", "'\\n'"),
        ("^a\tb$", "'\\t'"),
        ("^(?=a)a$", "lookahead"),
        ("(?<!a)b", "lookahead"),
        ("^a|^b", "anchor '^'"),
        ("a$b", "anchor '$'"),
        ("^[^]a]$", "`[]`"),
        ("^[]a]$", "`[]`"),
    ],
)
def test_pattern_problem(pattern: str, problem: str | None) -> None:
    found = pattern_problem(pattern)
    assert found is None if problem is None else problem in (found or "")


def test_json_equal() -> None:
    assert json_equal(1, 1.0) and json_equal({"a": [1]}, {"a": [1.0]})
    assert not json_equal(True, 1) and not json_equal(0, False) and not json_equal([1], [1, 1])

"""Why each keyword is (un)supported: one xgrammar probe per KEYWORDS.md row.

Every probe compiles the schema exactly like the engine (any_whitespace=False) and feeds
an **invalid** instance (checked with jsonschema). For unsupported forms xgrammar accepts
it (the keyword is silently lost) and the policy must refuse the schema or restate it exactly
(``grammars/json_schema/rewrites/rewrite.py``: xgrammar then refuses the instance); for supported
forms xgrammar refuses it and the policy must accept the schema. If an xgrammar upgrade
changes a behaviour, the matching row fails and the table needs revisiting.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from grammars.errors import GrammarError
from grammars.json_schema import check_schema

I, S = {"type": "integer"}, {"type": "string"}
OBJ_AB = {"a": {}, "b": {}}

LOST: dict[str, tuple[dict[str, Any], str]] = {
    "not": ({"not": I}, "1"),
    "if/then": ({"if": I, "then": {"type": "integer", "minimum": 3}}, "1"),
    "uniqueItems": ({"type": "array", "items": I, "uniqueItems": True}, "[1, 1]"),
    "contains": ({"type": "array", "items": {}, "contains": I}, '["a"]'),
    "dependentRequired": (
        {"type": "object", "properties": OBJ_AB, "additionalProperties": True, "dependentRequired": {"a": ["b"]}},
        '{"a": 1}',
    ),
    "dependentSchemas": (
        {"type": "object", "properties": OBJ_AB, "dependentSchemas": {"a": {"required": ["b"]}}},
        '{"a": 1}',
    ),
    "allOf, two branches": ({"allOf": [I, {"type": "integer", "minimum": 3}]}, "1"),
    "sibling of anyOf": ({"type": "integer", "anyOf": [I, S]}, '"x"'),
    "sibling of $ref": ({"$defs": {"a": I}, "$ref": "#/$defs/a", "maximum": 3}, "5"),
    "sibling of allOf": ({"type": "string", "allOf": [I]}, "1"),
    "oneOf, overlapping": ({"oneOf": [I, {"type": "number"}]}, "1"),
    "typeless pattern": ({"pattern": "^a$"}, '"b"'),
    "typeless minLength": ({"minLength": 2}, '"a"'),
    "typeless format": ({"format": "date"}, '"x"'),
    "typeless minimum": ({"minimum": 2}, "1"),
    "typeless patternProperties": ({"patternProperties": {"^a.*$": I}}, '{"ab": "x"}'),
    "typeless propertyNames": ({"propertyNames": {"maxLength": 1}}, '{"ab": 1}'),
    "typeless maxItems": ({"maxItems": 1}, "[1, 2]"),
    "multipleOf on number": ({"type": "number", "multipleOf": 0.5}, "1.3"),
    "fractional multipleOf": ({"type": "integer", "multipleOf": 1.5}, "2"),
    "multipleOf above 1024": ({"type": "integer", "multipleOf": 1025}, "1000"),
    "multipleOf, one bound": ({"type": "integer", "multipleOf": 3, "minimum": 0}, "4"),
    "multipleOf, wide range": ({"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 10_000}, "4"),
    "pattern + minLength": ({"type": "string", "pattern": "^a*$", "minLength": 2}, '"a"'),
    "format + pattern": ({"type": "string", "format": "date", "pattern": "^2020"}, '"2021-01-01"'),
    "format + maxLength": ({"type": "string", "format": "email", "maxLength": 6}, '"aaaa@b.co"'),
    "pattern naming a backslash": ({"type": "string", "pattern": "^a\\\\b$"}, '"a\\b"'),
    "pattern naming a quote": ({"type": "string", "pattern": '^a"$'}, '"a""'),
    "pattern naming a control char": ({"type": "string", "pattern": "^\t$"}, '"\t"'),
    "pattern lookahead": ({"type": "string", "pattern": "^(?!a)[a-z]$"}, '"a"'),
    "pattern anchor inside": ({"type": "string", "pattern": "b(^a)"}, '"ba"'),
    "required, undeclared": ({"type": "object", "required": ["a"]}, "{}"),
    "two patternProperties": (
        {"type": "object", "patternProperties": {"^a.*$": I, "^.*b$": {"type": "integer", "minimum": 5}}},
        '{"ab": 1}',
    ),
    "patternProperties over a property": (
        {"type": "object", "properties": {"ab": I}, "patternProperties": {"^a.*$": {"type": "integer", "minimum": 5}}},
        '{"ab": 1}',
    ),
    "propertyNames beside properties": (
        {"type": "object", "properties": {"abc": {}}, "propertyNames": {"maxLength": 2}},
        '{"abc": 1}',
    ),
    "propertyNames with anyOf": (
        {"type": "object", "propertyNames": {"anyOf": [{"pattern": "^a$"}, {"pattern": "^b$"}]}},
        '{"c": 1}',
    ),
    "minProperties, repeated key": (
        {"type": "object", "additionalProperties": I, "minProperties": 2},
        '{"a": 1, "a": 2}',
    ),
    "enum value breaking a sibling": ({"type": "string", "enum": ["a", 1]}, "1"),
    "$ref to an anchor": ({"$defs": {"a": {"$anchor": "foo", "type": "integer"}}, "$ref": "#foo"}, '"x"'),
}

KEPT: dict[str, tuple[dict[str, Any], str]] = {
    "type integer": (I, "1.5"),
    "integer bounds": ({"type": "integer", "minimum": 2, "exclusiveMaximum": 5}, "5"),
    "number bounds": ({"type": ["number", "null"], "minimum": 1.5, "maximum": 2.5}, "2.6"),
    "enum within type": ({"type": "string", "enum": ["a", "b"]}, '"c"'),
    "const object": ({"const": {"a": [1, 2]}}, '{"a":[1]}'),
    "pattern": ({"type": "string", "pattern": "^[a-z]+$"}, '"ab1"'),
    "negated class pattern": ({"type": "string", "pattern": '^[^a\\\\"]$'}, '"\\u0061"'),
    "length": ({"type": "string", "minLength": 2, "maxLength": 3}, '"abcd"'),
    "format": ({"type": "string", "format": "uuid"}, '"123"'),
    "required": ({"type": "object", "properties": OBJ_AB, "required": ["a"]}, '{"b": 1}'),
    "additionalProperties false": ({"type": "object", "properties": OBJ_AB, "additionalProperties": False}, '{"c": 1}'),
    "additionalProperties schema": ({"type": "object", "additionalProperties": I}, '{"c": "x"}'),
    "patternProperties alone": (
        {"type": "object", "patternProperties": {"^x_.*$": I}, "additionalProperties": False},
        '{"x_a": "s"}',
    ),
    "propertyNames alone": ({"type": "object", "propertyNames": {"pattern": "^[a-c]+$"}}, '{"z": 1}'),
    "min/maxProperties": (
        {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2, "maxProperties": 2},
        '{"a": 1}',
    ),
    "min/maxItems": ({"type": "array", "items": I, "minItems": 1, "maxItems": 2}, "[1, 2, 3]"),
    "prefixItems + items": ({"type": "array", "prefixItems": [I], "items": S}, "[1, 2]"),
    "unevaluatedProperties": ({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}, '{"b": 1}'),
    "anyOf": ({"anyOf": [I, S]}, "null"),
    "oneOf by type": ({"oneOf": [I, S, {"type": "null"}]}, "1.5"),
    "oneOf by discriminator": (
        {
            "oneOf": [
                {"type": "object", "properties": {"k": {"const": "a"}, "v": I}, "required": ["k", "v"]},
                {"type": "object", "properties": {"k": {"const": "b"}, "v": S}, "required": ["k", "v"]},
            ]
        },
        '{"k": "a", "v": "x"}',
    ),
    "allOf, one branch": ({"allOf": [I]}, '"a"'),
    "keywords of another type": (
        {"type": "integer", "format": "int32", "pattern": "^x$", "minLength": 3, "required": ["a"]},
        '"x"',
    ),
    "$ref recursion via $defs": (
        {
            "$defs": {
                "n": {
                    "type": "object",
                    "properties": {"c": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                    "required": ["c"],
                }
            },
            "$ref": "#/$defs/n",
        },
        '{"c": [{}]}',
    ),
}


@pytest.fixture(scope="module")
def accepts() -> Any:
    import xgrammar

    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False)

    def run(schema: dict[str, Any], text: str) -> bool:
        compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
        matcher = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    return run


def _invalid(schema: dict[str, Any], text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return True  # not even JSON
    checker = Draft202012Validator.FORMAT_CHECKER  # format asserted, as users mean it
    return not Draft202012Validator(schema, format_checker=checker).is_valid(value)


@pytest.mark.parametrize("name", sorted(LOST))
def test_lost_keywords_let_invalid_output_through(name: str, accepts: Any) -> None:
    schema, text = LOST[name]
    assert _invalid(schema, text)
    assert accepts(schema, text), "xgrammar now enforces this: revisit KEYWORDS.md"
    try:
        checked = check_schema(schema)
    except GrammarError:
        return  # refused
    assert checked.rewritten, "served as it is although xgrammar loses a keyword"
    assert not accepts(checked.schema, text), "the exact rewrite lets the invalid output through"


@pytest.mark.parametrize("name", sorted(KEPT))
def test_supported_keywords_refuse_invalid_output(name: str, accepts: Any) -> None:
    from sglang.srt.constrained.json_schema_validation import validate_xgrammar_json_schema

    schema, text = KEPT[name]
    assert _invalid(schema, text)
    assert not accepts(schema, text)
    validate_xgrammar_json_schema(check_schema(schema).schema)  # the engine agrees


def test_root_recursion_breaks_the_token_mask() -> None:
    """Why ``$ref: "#"`` is refused: the bitmask forbids ``}}`` that the matcher accepts."""
    import xgrammar

    from assets import model_dir
    from grammars.compile import compile_text, load_compiler
    from tools.grammar_check import _allowed

    tok, compiler = load_compiler(model_dir("smollm2"))
    results = {}
    for ref, defs in (("#", {}), ("#/$defs/n", {"$defs": {"n": None}})):
        node: dict[str, Any] = {"type": "object", "properties": {"x": {"$ref": ref}}}
        schema = {**defs, "$defs": {"n": node}, "$ref": "#/$defs/n"} if defs else node
        compiled = compile_text(compiler, "json_schema", json.dumps(schema))
        matcher = xgrammar.GrammarMatcher(compiled)
        bitmask = xgrammar.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
        ids = tok.encode('{"x": {"x": {}}}', add_special_tokens=False)
        for token in ids[:-1]:
            assert matcher.accept_token(token)
        matcher.fill_next_token_bitmask(bitmask)
        assert tok.decode([ids[-1]]) == "}}" and matcher.fork().accept_token(ids[-1])
        results[ref] = _allowed(bitmask, ids[-1])
    assert results == {"#": False, "#/$defs/n": True}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "multipleOf": 3},
        {"type": ["integer", "null"], "multipleOf": 3, "exclusiveMinimum": -1, "maximum": 9998},
    ],
)
def test_multiple_of_enforced_by_xgrammar_but_refused_by_sglang(schema: dict[str, Any], accepts: Any) -> None:
    from sglang.srt.constrained.json_schema_validation import (
        UnsupportedJSONSchemaFeature,
        validate_xgrammar_json_schema,
    )

    assert not accepts(schema, "4") and accepts(schema, "3")
    with pytest.raises(UnsupportedJSONSchemaFeature):
        validate_xgrammar_json_schema(schema)
    with pytest.raises(GrammarError):
        check_schema(schema)

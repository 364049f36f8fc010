"""The exact rewrites (``grammars/json_schema/rewrites/rewrite.py``) admit no invalid instance.

For each construct (``allOf`` of objects, a discriminated ``oneOf``, ``not`` of a type or of
values, ``dependentRequired`` and draft 7's ``dependencies``, ``enum`` folded with its siblings, ``oneOf`` disjoint by declared
types or by required names, ``required`` names not declared), every instance of a bounded domain (each declared property
absent or one of a few values of every JSON type) is serialized as the grammar emits it and
run through the real token matchers (llguidance as the service routes it, and xgrammar) with
SmolLM2's tokenizer. Checked per instance, against jsonschema on the client's original schema:
- accepted by either library => valid (no invalid instance admitted);
- valid, and within strict mode's narrowing (no undeclared member) => accepted by llguidance
  (nothing valid is refused beyond that narrowing).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from grammars.compile import compile_text, json_schema_to_lark, load_compiler, strict_schema
from grammars.json_schema import LinearValidator, check_schema
from tests.grammars.test_llguidance_json import SPACED, Guidance
from tools.grammar_check import grammar_text, walk_tokens

VALUES: list[Any] = ["x", "y", 0, 1.5, True, None, [1]]
ABSENT = object()

CASES: dict[str, dict[str, Any]] = {
    "allOf of two objects": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]
    },
    "allOf with a closed part": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "additionalProperties": False,
        "allOf": [{"properties": {"a": {"enum": ["x"]}}, "required": ["a"]}],
    },
    "oneOf with a discriminator": {
        "oneOf": [
            {"type": "object", "properties": {"k": {"const": "x"}, "v": {"type": "string"}}, "required": ["k", "v"]},
            {"type": "object", "properties": {"k": {"const": "y"}, "v": {"type": "integer"}}, "required": ["k"]},
        ]
    },
    "oneOf by required names": {
        "type": "object",
        "oneOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"], "additionalProperties": False},
            {"properties": {"c": {"type": "string"}}, "required": ["c"], "additionalProperties": False},
        ],
    },
    "required names not declared": {
        "type": "object",
        "properties": {"b": {"type": "string"}},
        "required": ["a", "b"],
        "additionalProperties": {"type": "integer"},
    },
    "not of types": {
        "type": "object",
        "properties": {"a": {"not": {"type": ["string", "array", "object", "null"]}}},
        "required": ["a"],
    },
    "not of a value": {
        "type": "object",
        "properties": {"a": {"enum": ["x", "y", 0], "not": {"const": "y"}}},
        "required": ["a"],
    },
    "dependentRequired": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
        "dependentRequired": {"a": ["b"], "c": ["a"]},
        "additionalProperties": False,
    },
    "draft 7 dependencies": {  # checked with draft 7's validator ($schema): 2020-12 ignores the keyword
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
        "dependencies": {"a": ["b", "c"]},
        "additionalProperties": False,
    },
    "enum beside not and allOf": {
        "type": "object",
        "properties": {
            "a": {"enum": ["x", "y", 0, 1.5, None], "not": {"type": "number"}, "allOf": [{"not": {"const": "y"}}]}
        },
        "required": ["a"],
    },
    "allOf with an enum part": {
        "type": "object",
        "properties": {
            "a": {"allOf": [{"enum": ["x", 0, [1], True]}, {"not": {"type": "array"}}, {"not": {"const": 0}}]}
        },
        "required": ["a"],
    },
    "oneOf by declared types": {
        "type": "object",
        "properties": {
            "a": {"oneOf": [{"type": "string", "minLength": 1}, {"$ref": "#/$defs/n"}, {"type": "boolean"}]}
        },
        "required": ["a"],
        "$defs": {"n": {"type": "number", "minimum": 1}},
    },
    "anyOf beside object assertions": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    },
    "$ref beside an assertion": {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/s", "not": {"type": "number"}}},
        "required": ["a"],
        "$defs": {"s": {"type": ["string", "number", "null"]}},
    },
    "pattern implying its lengths": {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^[xy]{1,2}$", "minLength": 1, "maxLength": 2}},
        "required": ["a"],
    },
    "allOf of typed parts": {
        "type": "object",
        "properties": {"a": {"allOf": [{"type": ["string", "number"]}, {"not": {"type": "number"}}, {"maxLength": 3}]}},
        "required": ["a"],
    },
}


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any, Guidance]:
    from assets import model_dir

    tokenizer, compiler = load_compiler(model_dir("smollm2"))
    return tokenizer, compiler, Guidance(tokenizer)


def _names(schema: Any) -> list[str]:
    """Every property name declared or required anywhere in the schema, in order."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            required = node.get("required") if isinstance(node.get("required"), list) else []
            found += [n for n in dict.fromkeys([*node.get("properties", {}), *required]) if n not in found]
            stack += [v for v in node.values() if isinstance(v, (dict, list))]
        elif isinstance(node, list):
            stack += node
    return found


def _domain(schema: Any) -> list[dict[str, Any]]:
    names = _names(schema)
    out = []
    for combo in itertools.product([ABSENT, *VALUES], repeat=len(names)):
        out.append({n: v for n, v in zip(names, combo) if v is not ABSENT})
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_rewritten_constructs_admit_no_invalid_instance(smollm2, name):
    tokenizer, compiler, guidance = smollm2
    original = CASES[name]
    checked = check_schema(original)  # refused before the rewrite: UnsupportedKeywordError
    assert checked.rewritten, "served without a rewrite: not what this test is about"
    served = json.loads(checked.canonical)
    lark = json_schema_to_lark(served)  # routed to llguidance (NotExpressible otherwise)
    compiled = compile_text(compiler, "json_schema", checked.canonical)
    valid, narrowed = validator_for(original)(original), LinearValidator(strict_schema(served))
    accepted = refused_valid = 0
    failures: list[str] = []
    for instance in _domain(original):
        by_llguidance = guidance.accepts(lark, grammar_text(instance, served, const_separators=SPACED))
        by_xgrammar = walk_tokens(compiled, tokenizer, grammar_text(instance, served)).accepted
        ok = valid.is_valid(instance)
        accepted += by_llguidance
        if (by_llguidance or by_xgrammar) and not ok:
            failures.append(f"admits invalid {instance} (llguidance {by_llguidance}, xgrammar {by_xgrammar})")
        elif ok and narrowed.is_valid(instance) and not by_llguidance:
            refused_valid += 1
            failures.append(f"refuses valid {instance}")
    assert accepted >= 2, accepted
    assert not failures, failures[:10]


PATTERN_OVER_DECLARED = {
    "type": "object",
    "properties": {"ab": {"type": ["string", "integer"]}, "c": {"type": "string"}},
    "patternProperties": {"^a": {"type": ["integer", "null"]}},
    "required": ["ab"],
}
"""Served by xgrammar only (``patternProperties`` is not routed to llguidance)."""


def test_a_declared_name_a_pattern_matches_holds_both_schemas(smollm2):
    """``ab`` must be an integer (string|integer and integer|null); an undeclared ``ax`` is
    checked against the pattern's schema; through xgrammar's token matcher."""
    tokenizer, compiler, _ = smollm2
    checked = check_schema(PATTERN_OVER_DECLARED)  # refused before: ab clashes with ^a
    assert checked.rewritten
    served = json.loads(checked.canonical)
    compiled = compile_text(compiler, "json_schema", checked.canonical)
    valid = Draft202012Validator(PATTERN_OVER_DECLARED)
    instances = [{**d, **extra} for d in _domain(PATTERN_OVER_DECLARED) for extra in ({}, {"ax": 1}, {"ax": "x"})]
    failures, accepted = [], 0
    for instance in instances:
        by_xgrammar = walk_tokens(compiled, tokenizer, grammar_text(instance, served)).accepted
        accepted += by_xgrammar
        if by_xgrammar and not valid.is_valid(instance):
            failures.append(f"admits invalid {instance}")
    assert accepted >= 2, accepted
    assert not failures, failures[:10]

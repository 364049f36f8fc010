"""Every grammar error type: code, pointer, keyword, message; limits; purity (pure, ms)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grammars.errors import (
    GrammarCompileError,
    GrammarError,
    InvalidSchemaError,
    RemoteRefError,
    SchemaTooComplexError,
    Unsupported,
    UnsupportedKeywordError,
)
from grammars.json_schema import SchemaLimits, check_schema

ROOT = Path(__file__).resolve().parents[3]


def _raises(schema: object, error: type[GrammarError], **kwargs: object) -> GrammarError:
    with pytest.raises(error) as info:
        check_schema(schema, **kwargs)  # type: ignore[arg-type]
    assert type(info.value) is error
    return info.value


def test_codes_are_stable() -> None:
    assert [
        c.code
        for c in (
            InvalidSchemaError,
            UnsupportedKeywordError,
            RemoteRefError,
            SchemaTooComplexError,
            GrammarCompileError,
        )
    ] == ["invalid_schema", "unsupported_schema_keyword", "remote_ref", "schema_too_complex", "grammar_compile_failed"]
    assert all(issubclass(c, GrammarError) for c in (InvalidSchemaError, RemoteRefError))


def test_invalid_type_names_the_value() -> None:
    err = _raises({"type": "objekt"}, InvalidSchemaError)
    assert (err.pointer, err.keyword, err.param) == ("/type", "type", None)
    assert err.message.startswith("not a valid JSON Schema (Draft 2020-12) at /type: 'objekt'")


def test_invalid_nested_pointer() -> None:
    err = _raises({"properties": {"a/b": {"minLength": -1}}}, InvalidSchemaError)
    assert (err.pointer, err.keyword) == ("/properties/a~1b/minLength", "minLength")


@pytest.mark.parametrize("schema", [True, False, [], "x", None, 3])
def test_root_must_be_an_object(schema: object) -> None:
    err = _raises(schema, InvalidSchemaError)
    assert err.pointer == "" and "must be a JSON object" in err.message
    assert ("use {} for any JSON value" in err.message) is (schema is True)


def test_dangling_local_ref_is_invalid() -> None:
    err = _raises({"properties": {"a": {"$ref": "#/$defs/missing"}}}, InvalidSchemaError)
    assert (err.pointer, err.keyword) == ("/properties/a", "$ref")


def test_unsupported_lists_every_occurrence() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "n": {"type": "number", "multipleOf": 0.5},
            "x": {"not": {"type": "string", "minLength": 2}},
        },
        "if": {"required": ["n"]},
    }
    err = _raises(schema, UnsupportedKeywordError)
    assert isinstance(err, UnsupportedKeywordError)
    assert [(u.keyword, u.pointer) for u in err.unsupported] == [
        ("if", ""),
        ("uniqueItems", "/properties/tags"),
        ("multipleOf", "/properties/n"),
        ("not", "/properties/x"),
    ]  # the "required" under "if" names an undeclared property: declared (exact), not reported
    assert (err.keyword, err.pointer) == ("if", "")
    assert "`uniqueItems` at /properties/tags: ignored by xgrammar" in err.message
    assert '"allow_schema_loosening": true' in err.message


def test_a_known_assertion_beside_an_unknown_keyword_is_still_unsupported() -> None:
    err = _raises({"type": "string", "nullable": True, "x-foo": 1}, UnsupportedKeywordError)
    assert [(u.keyword, u.pointer) for u in err.unsupported] == [("nullable", "")]


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "other.json#/a", "urn:x:y"])
def test_remote_ref(ref: str) -> None:
    err = _raises({"type": "object", "properties": {"a": {"$ref": ref}}}, RemoteRefError)
    assert (err.pointer, err.keyword) == ("/properties/a", "$ref")
    assert ref in err.message and "#/$defs/" in err.message


def _deep(levels: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_ten_thousand_levels_fail_fast_without_recursion() -> None:
    schema = _deep(10_000)
    began = time.perf_counter()
    err = _raises(schema, SchemaTooComplexError)
    assert time.perf_counter() - began < 0.5
    assert err.pointer == "/properties/a" * 64 and err.keyword is None
    assert "nested deeper than 128 JSON levels" in err.message


def test_subschema_depth_limit_is_exact() -> None:
    check_schema(_deep(31))  # root + 31 levels = depth 32: fine
    err = _raises(_deep(32), SchemaTooComplexError)
    assert err.pointer == "/properties/a" * 32
    assert "subschemas are nested deeper than 32 levels" in err.message


def test_node_limit() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10)}}
    check_schema(schema, limits=SchemaLimits(max_nodes=11))
    err = _raises(schema, SchemaTooComplexError, limits=SchemaLimits(max_nodes=10))
    assert err.pointer == "/properties/p9" and "more than 10 subschemas" in err.message


def test_huge_enum() -> None:
    began = time.perf_counter()
    err = _raises({"properties": {"e": {"enum": list(range(100_000))}}}, SchemaTooComplexError)
    assert time.perf_counter() - began < 0.5
    assert (err.pointer, err.keyword) == ("/properties/e", "enum")
    assert "an enum has 100000 values (limit 1000)" in err.message


def test_byte_limit() -> None:
    schema = {"type": "string", "description": "x" * 300_000}
    err = _raises(schema, SchemaTooComplexError)
    assert err.pointer == "" and "300037 bytes (limit 200000)" in err.message


def test_deep_const_data_is_bounded_too() -> None:
    data: object = 0
    for _ in range(5000):
        data = [data]
    err = _raises({"const": data}, SchemaTooComplexError)
    assert err.pointer.startswith("/const/0/0")


def test_with_param_copies() -> None:
    err = _raises({"type": "array", "uniqueItems": True}, UnsupportedKeywordError)
    assert isinstance(err, UnsupportedKeywordError)
    tagged = err.with_param("tools.2.function.parameters")
    assert type(tagged) is UnsupportedKeywordError and tagged is not err
    assert (tagged.param, err.param) == ("tools.2.function.parameters", None)
    assert tagged.unsupported == err.unsupported and str(tagged) == err.message


def test_unsupported_describe_and_empty_list() -> None:
    assert Unsupported("uniqueItems", "", "r").describe() == "`uniqueItems` at /: r"
    assert Unsupported("oneOf", None, "r").describe() == "`oneOf` at (location unknown): r"
    with pytest.raises(ValueError):
        UnsupportedKeywordError([])


def test_policy_modules_are_pure() -> None:
    code = (
        "import sys, json, grammars.json_schema.policy, grammars.errors, grammars.json_schema.canonical, "
        "grammars.compile.compiler, grammars.compile.xgrammar_calls\n"
        "grammars.json_schema.policy.check_schema({'type': 'object'})\n"
        "print(json.dumps(sorted({'torch', 'xgrammar', 'sglang', 'fastapi', 'transformers'}"
        " & set(sys.modules))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []

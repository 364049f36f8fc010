"""Schemas the grammar can never complete are a 400 before the engine sees them.

The policy (pure, ``grammars.json_schema.productive``) is checked shape by shape, and each shape is
run through the real xgrammar 0.2.7 (a 96-token synthetic vocabulary: no assets) to pin
the policy to what xgrammar does with it:

- a ``$ref`` loop that consumes nothing (``cycle``): xgrammar compiles it, but its token
  mask is empty where the value starts; SGLang then samples an arbitrary token and
  aborts with a 500 quoting the schema (seen on SGLang 0.5.23 before this check);
- a required recursion (``recursion``): xgrammar keeps accepting one more level and
  never lets the value end (only ``max_tokens`` stops it);
- a reference to ``false`` (``empty``): an xgrammar compile error;
- the accepted shapes (recursion with a way out, loops with a base branch, loops nobody
  references): xgrammar completes a valid instance.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from grammars.errors import UnsatisfiableSchemaError
from grammars.json_schema import check_schema

LOOP = {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}
NODE_X = {
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/n"}},
    "required": ["x"],
    "additionalProperties": False,
}

# name: (schema, kind, pointer, keyword, the text xgrammar reads up to the dead value)
REJECTED: dict[str, tuple[dict[str, Any], str, str, str | None, str]] = {
    "a->b->a via $defs from the root": ({"$defs": LOOP, "$ref": "#/$defs/a"}, "cycle", "/$defs/a", "$ref", ""),
    "a->a": ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "cycle", "/$defs/a", "$ref", ""),
    "a->b->a via definitions": (
        {
            "definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
            "$ref": "#/definitions/a",
        },
        "cycle",
        "/definitions/a",
        "$ref",
        "",
    ),
    "through allOf": (
        {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        "cycle",
        "/$defs/a",
        "$ref",
        "",
    ),
    "through anyOf with no way out": (
        {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        "cycle",
        "/$defs/a",
        "$ref",
        "",
    ),
    "loop under a required property": (
        {
            "$defs": LOOP,
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/a"}},
            "required": ["p"],
            "additionalProperties": False,
        },
        "cycle",
        "/$defs/a",
        "$ref",
        '{"p": ',
    ),
    "loop under an optional property": (
        {
            "$defs": LOOP,
            "type": "object",
            "properties": {"q": {"type": "integer"}, "p": {"$ref": "#/$defs/a"}},
            "additionalProperties": False,
        },
        "cycle",
        "/$defs/a",
        "$ref",
        '{"p": ',
    ),
    "loop as additionalProperties": (
        {"$defs": LOOP, "type": "object", "additionalProperties": {"$ref": "#/$defs/a"}},
        "cycle",
        "/$defs/a",
        "$ref",
        '{"k": ',
    ),
    "loop as a second prefix item": (
        {"$defs": LOOP, "type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/a"}]},
        "cycle",
        "/$defs/a",
        "$ref",
        "[1, ",
    ),
    "required self-recursion": ({"$defs": {"n": NODE_X}, "$ref": "#/$defs/n"}, "recursion", "/$defs/n", "required", ""),
    "required self-recursion, optional use": (
        {"$defs": {"n": NODE_X}, "type": "object", "properties": {"o": {"$ref": "#/$defs/n"}}},
        "recursion",
        "/$defs/n",
        "required",
        '{"o": ',
    ),
    "minItems self-recursion": (
        {"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1}}, "$ref": "#/$defs/n"},
        "recursion",
        "/$defs/n",
        "minItems",
        "",
    ),
    "reference to false": (
        {"$defs": {"f": False}, "type": "object", "properties": {"p": {"$ref": "#/$defs/f"}}},
        "empty",
        "/properties/p",
        None,
        "",
    ),
}

# name: (schema, a valid instance the grammar must complete)
ACCEPTED: dict[str, tuple[dict[str, Any], Any]] = {
    "loop with a base branch": (
        {
            "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a",
        },
        None,
    ),
    "optional self-recursion": (
        {
            "$defs": {
                "n": {"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}}, "additionalProperties": False}
            },
            "$ref": "#/$defs/n",
        },
        {"x": {"x": {}}},
    ),
    "required recursion with a way out": (
        {
            "$defs": {
                "n": {
                    "type": "object",
                    "properties": {"x": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}},
                    "required": ["x"],
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/n",
        },
        {"x": {"x": None}},
    ),
    "tree": (
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/node",
        },
        {"children": [{"children": []}]},
    ),
    "loop nobody references": ({"$defs": LOOP, "type": "integer"}, 7),
    "loop behind a type that excludes it": ({"$defs": LOOP, "type": "integer", "items": {"$ref": "#/$defs/a"}}, 7),
    "additionalProperties false": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        {"a": 1},
    ),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsatisfiable_shapes_are_rejected(name: str) -> None:
    schema, kind, pointer, keyword, _ = REJECTED[name]
    before = copy.deepcopy(schema)
    for loosen in (False, True):  # not a keyword the grammar could drop
        with pytest.raises(UnsatisfiableSchemaError) as info:
            check_schema(schema, allow_loosening=loosen)
        err = info.value
        assert (err.code, err.pointer, err.keyword) == ("unsatisfiable_schema", pointer, keyword)
        assert f"at {pointer}:" in err.message
        expected = {"cycle": "consumes no input", "recursion": "no finite JSON value", "empty": "matches no value"}[
            kind
        ]
        assert expected in err.message
    assert schema == before


def test_the_message_shows_the_loop() -> None:
    with pytest.raises(UnsatisfiableSchemaError) as info:
        check_schema(REJECTED["loop under a required property"][0])
    assert (
        "# -(required)-> #/properties/p -($ref)-> #/$defs/a -($ref)-> #/$defs/b -($ref)-> #/$defs/a"
    ) in info.value.message
    assert "anyOf branch that is not a reference" in info.value.message


def test_a_loop_through_oneOf_is_found_after_loosening() -> None:
    """oneOf over references is unsupported (xgrammar cannot prove it disjoint); loosened
    to anyOf it is still a loop."""
    schema = {"$defs": {"a": {"oneOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
    with pytest.raises(UnsatisfiableSchemaError) as info:
        check_schema(schema, allow_loosening=True)
    assert "#/$defs/a -(anyOf)-> #/$defs/a/anyOf/0 -($ref)-> #/$defs/a" in info.value.message


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_completable_shapes_are_accepted(name: str) -> None:
    schema, _ = ACCEPTED[name]
    assert check_schema(schema).schema is schema


def test_long_reference_chains_do_not_recurse() -> None:
    """A 20001-link reference chain closing into a loop: the analysis walks it with explicit
    queues (a recursive walk would hit Python's recursion limit here) and names the loop.
    Not timed: timings belong in bench/, never in unit tests."""
    from grammars.json_schema.productive import find_unproductive

    links = 20000
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(links)}
    defs[f"d{links}"] = {"$ref": "#/$defs/d0"}
    found = find_unproductive({"$defs": defs, "$ref": "#/$defs/d0"})
    assert found is not None and (found.kind, found.pointer) == ("cycle", "/$defs/d0")


# --- the same shapes through the real xgrammar -------------------------------------

VOCAB = [chr(c) for c in range(32, 127)] + ["<eos>"]
EOS = len(VOCAB) - 1


@pytest.fixture(scope="module")
def xgr_compiler() -> Any:
    import xgrammar

    info = xgrammar.TokenizerInfo(VOCAB, stop_token_ids=[EOS])
    return xgrammar.GrammarCompiler(info, cache_enabled=False)


def _matcher_after(compiler: Any, schema: dict[str, Any], text: str) -> Any:
    import xgrammar

    # what SGLang compiles: the canonical text, no free whitespace
    compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
    matcher = xgrammar.GrammarMatcher(compiled)
    for char in text:
        assert matcher.accept_string(char), f"xgrammar refused {char!r} after {text!r}"
    return matcher


def _allowed(matcher: Any) -> set[str]:
    import xgrammar

    mask = xgrammar.allocate_token_bitmask(1, len(VOCAB))
    matcher.fill_next_token_bitmask(mask)
    return {VOCAB[i] for i in range(len(VOCAB)) if (int(mask[0, i // 32]) >> (i % 32)) & 1}


def _kind(schema: dict[str, Any]) -> str | None:
    from grammars.json_schema.productive import find_unproductive

    found = find_unproductive(schema)
    return None if found is None else found.kind


@pytest.mark.parametrize("name", sorted(n for n in REJECTED if REJECTED[n][1] == "cycle"))
def test_a_cycle_is_where_xgrammar_allows_no_token(xgr_compiler: Any, name: str) -> None:
    schema, _, _, _, prefix = REJECTED[name]
    assert _kind(schema) == "cycle"
    assert _allowed(_matcher_after(xgr_compiler, schema, prefix)) == set()


@pytest.mark.parametrize("name", sorted(n for n in REJECTED if REJECTED[n][1] == "recursion"))
def test_a_recursion_is_where_xgrammar_never_ends(xgr_compiler: Any, name: str) -> None:
    schema, _, _, _, prefix = REJECTED[name]
    assert _kind(schema) == "recursion"
    level = '{"x": ' if "required" in name else "["
    for depth in range(6):
        allowed = _allowed(_matcher_after(xgr_compiler, schema, prefix + level * depth))
        assert allowed and allowed <= {"{", "["}, (depth, allowed)  # one more level, never an end


def test_a_reference_to_false_is_an_xgrammar_compile_error(xgr_compiler: Any) -> None:
    schema = REJECTED["reference to false"][0]
    assert _kind(schema) == "empty"
    with pytest.raises(RuntimeError, match="cannot accept any value"):
        _matcher_after(xgr_compiler, schema, "")


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_shapes_are_ones_xgrammar_completes(xgr_compiler: Any, name: str) -> None:
    schema, instance = ACCEPTED[name]
    assert _kind(schema) is None
    text = json.dumps(instance)  # ", " and ": " separators: what xgrammar emits
    matcher = _matcher_after(xgr_compiler, schema, text)
    assert EOS in {VOCAB.index(t) for t in _allowed(matcher)}
    assert matcher.accept_token(EOS) and matcher.is_terminated()


def test_the_policy_stays_pure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, grammars.json_schema.productive, grammars.json_schema.policy\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'sglang', 'xgrammar', 'fastapi'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""``schema_verdict``'s routes and the policy's metaschema check.

- ``exact`` (a ``response_format`` schema): llguidance's own JSON Schema compiler is asked first,
  so a schema it takes keeps JSON Schema's semantics; one it refuses takes the strict routes.
- The metaschema check answers a valid schema with jsonschema-rs (the Python validator takes
  hundreds of milliseconds on a large schema) and must agree with the Python validator, which
  still names the error of an invalid one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from grammars.compile import LarkRouter, schema_verdict
from grammars.errors import InvalidSchemaError
from grammars.json_schema import check_schema
from grammars.json_schema.policy import _fast_metaschema_is_valid

ROUTER = LarkRouter(Path("/nonexistent/tokenizer.json"))
OPEN = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
INVALID = [
    {"type": "strin"},
    {"properties": {"a": {"minLength": "3"}}},
    {"required": "a"},
    {"items": [{"type": "string"}], "prefixItems": 3},
    {"$defs": {"x": {"enum": 5}}},
    {"anyOf": []},
    {"type": "object", "minProperties": -1},
]


def test_exact_asks_llguidances_own_compiler_first() -> None:
    exact = schema_verdict(OPEN, router=ROUTER, exact=True)
    assert exact.served and exact.native and exact.library == "llguidance"
    assert '"additionalProperties"' not in (exact.lark or "")  # undeclared members stay allowed
    strict = schema_verdict(OPEN, router=ROUTER)
    assert strict.served and not strict.native and strict.library == "llguidance"


def test_a_schema_llguidance_refuses_takes_the_strict_routes_under_exact() -> None:
    verdict = schema_verdict({"type": "string", "format": "uri-reference"}, router=ROUTER, exact=True)
    assert verdict.served and not verdict.native and verdict.library == "xgrammar"


def test_the_fast_metaschema_check_agrees_with_the_python_validator_over_the_suite() -> None:
    from assets import schema_suite_dir

    python = Draft202012Validator(Draft202012Validator.META_SCHEMA)
    schemas = [
        case["schema"] for path in sorted(schema_suite_dir().glob("*.json")) for case in json.loads(path.read_text())
    ]
    schemas += INVALID
    disagree = [s for s in schemas if isinstance(s, dict) and _fast_metaschema_is_valid(s) != python.is_valid(s)]
    assert len(schemas) > 300 and not disagree, disagree


@pytest.mark.parametrize("schema", INVALID, ids=[json.dumps(s) for s in INVALID])
def test_an_invalid_schema_is_still_named_by_the_python_validator(schema) -> None:
    with pytest.raises(InvalidSchemaError) as err:
        check_schema(schema)
    assert "not a valid JSON Schema (Draft 2020-12) at " in err.value.message

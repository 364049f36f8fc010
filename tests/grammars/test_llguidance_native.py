"""``response_format`` schemas go whole to llguidance's own JSON Schema compiler first (JSON
Schema's semantics), which refuses what it cannot enforce; schemas with keywords xgrammar cannot
enforce go nowhere else. Over the JSON-Schema-Test-Suite (draft2020-12), every schema the policy
passes or defers (``CheckedSchema.unenforced``: ``deferred``, only those) and
``LarkRouter.route_native`` takes is walked with SmolLM2's tokenizer, every instance as SGLang's
JSON spacing writes it:
- no invalid instance is accepted (the native route is as sound as the policy's own);
- the schemas it serves cover a real share of the suite, and the only valid instances it refuses
  are the suite's "format is only an annotation" cases (the service enforces ``format``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grammars.compile import LarkRouter, load_compiler
from grammars.compile.llguidance_lark import NotExpressible, json_schema_to_lark
from grammars.errors import GrammarError
from grammars.json_schema import check_schema
from tests.grammars.test_llguidance_json import SPACED, Guidance, suite_served
from tools.grammar_check import grammar_text

NO_TOKENIZER = Path("/nonexistent/tokenizer.json")


@pytest.fixture(scope="module")
def guidance() -> Guidance:
    from assets import model_dir

    tokenizer, _ = load_compiler(model_dir("smollm2"))
    return Guidance(tokenizer)


def _native(schema: Any, router: LarkRouter, deferred: bool) -> tuple[dict[str, Any], str] | None:
    """(the schema as sent, its Lark grammar) when the native route serves it (``deferred``: only
    those the policy defers, which no other route may serve)."""
    try:
        checked = check_schema(schema, defer_unsupported=True)
    except GrammarError:
        return None
    if deferred and not checked.unenforced:
        return None
    lark, _ = router.route_native(checked.canonical)
    return None if lark is None else (json.loads(checked.canonical), lark)


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "response_format"])
def test_the_native_route_accepts_no_invalid_instance_of_the_suite(guidance, deferred):
    router = LarkRouter(NO_TOKENIZER)
    served, valid, refused_valid, unsound = 0, 0, [], []
    for named, case, schema, lark in suite_served(lambda s: _native(s, router, deferred)):
        served += 1
        for test in case["tests"]:
            where = f"{named}: {test['description']}"
            accepted = guidance.accepts(lark, grammar_text(test["data"], schema, const_separators=SPACED))
            if accepted and not test["valid"]:
                unsound.append(where)
            valid += test["valid"]
            if test["valid"] and not accepted:
                refused_valid.append(where)
    assert not unsound, unsound
    assert served >= (30 if deferred else 120), served  # a real share of the suite's schemas
    # the one narrowing: ``format`` is enforced (the suite's "only an annotation" cases)
    assert all(where.startswith("format.json: ") for where in refused_valid), refused_valid
    print(f"\nnative route: {served} suite schemas, {valid} valid instances, {len(refused_valid)} refused")


def _closed(schema: Any, router: LarkRouter) -> tuple[dict[str, Any], str] | None:
    """(the schema as sent, its Lark grammar) when ``grammar.json_schema_semantics: strict`` sends
    a policy-passed schema the translation does not cover to llguidance's own compiler."""
    try:
        checked = check_schema(schema)
        json_schema_to_lark(json.loads(checked.canonical))
        return None  # translated: tests/grammars/test_llguidance_json.py
    except GrammarError:
        return None
    except NotExpressible:
        lark = router.route("json_schema", checked.canonical)
    return None if lark is None else (json.loads(checked.canonical), lark)


def test_strict_mode_through_llguidances_compiler_accepts_no_invalid_instance_of_the_suite(guidance):
    """Strict mode written out is narrower than the schema (valid instances may be refused), never
    looser: no invalid instance accepted."""
    router = LarkRouter(NO_TOKENIZER)
    served, unsound = 0, []
    for named, case, schema, lark in suite_served(lambda s: _closed(s, router)):
        served += 1
        for test in case["tests"]:
            text = grammar_text(test["data"], schema, const_separators=SPACED)
            if not test["valid"] and guidance.accepts(lark, text):
                unsound.append(f"{named}: {test['description']}")
    assert not unsound, unsound
    assert served >= 5, served
    print(f"\nstrict mode through llguidance's compiler: {served} suite schemas")

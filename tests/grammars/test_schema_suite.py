"""The official JSON-Schema-Test-Suite (draft2020-12) against the policy and xgrammar.

For every schema in ``tests/draft2020-12/*.json`` (the ``optional/`` folder is skipped:
format assertion, ECMA-regex and bignum extras are not part of the 2020-12 core;
remote-ref cases are kept: the policy must reject them with ``RemoteRefError``, so no
remote is ever fetched):

- ``check_schema`` either accepts it or raises a ``GrammarError`` (a named reason), in
  bounded time;
- accepted schemas pass SGLang's own ``validate_xgrammar_json_schema`` (the engine will
  not refuse what we accept) and compile with the SmolLM2 tokenizer exactly like the
  engine, without any xgrammar warning, except the documented compile errors below;
- every suite instance is serialized as the grammar emits JSON and walked token by token:
  no invalid instance may be accepted (soundness); a valid one refused must be listed in
  ``NARROWING`` with its reason. Both lists are exact: a new or vanished case fails.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grammars.compile import capture_warnings, compile_text, load_compiler
from grammars.errors import GrammarError
from grammars.json_schema import check_schema
from tools.grammar_check import grammar_text, walk_tokens

STRICT = "strict mode: undeclared properties/items are refused unless the schema allows them"
TYPELESS = "no `type`, but object/array keywords: xgrammar admits only objects/arrays"
ANCHORED = "patternProperties patterns must match the whole property name"
FALSE = "xgrammar 0.2.7 refuses `false` subschemas here (compile error)"

NARROWING: dict[tuple[str, str, str], str] = {
    **{
        ("additionalProperties.json", "additionalProperties being false does not allow other properties", t): TYPELESS
        for t in ("ignores arrays", "ignores strings", "ignores other non-objects")
    },
    (
        "additionalProperties.json",
        "additionalProperties being false does not allow other properties",
        "patternProperties are not additional properties",
    ): ANCHORED,
    (
        "additionalProperties.json",
        "non-ASCII pattern with additionalProperties",
        "matching the pattern is valid",
    ): ANCHORED,
    (
        "additionalProperties.json",
        "additionalProperties are allowed by default",
        "additional properties are allowed",
    ): STRICT,
    ("anyOf.json", "anyOf complex types", "both anyOf valid (complex)"): STRICT,
    ("items.json", "a schema given for items", "ignores non-arrays"): TYPELESS,
    ("items.json", "a schema given for items", "JavaScript pseudo-array is valid"): TYPELESS,
    ("prefixItems.json", "a schema given for prefixItems", "array with additional items"): STRICT,
    ("prefixItems.json", "a schema given for prefixItems", "JavaScript pseudo-array is valid"): TYPELESS,
    ("prefixItems.json", "additional items are allowed by default", "only the first item is validated"): STRICT,
    ("properties.json", "object properties validation", "doesn't invalidate other properties"): STRICT,
    **{
        ("properties.json", d, t): TYPELESS
        for t in ("ignores arrays", "ignores other non-objects")
        for d in ("object properties validation", "properties whose names are Javascript object property names")
    },
    **{
        ("required.json", "required validation", t): TYPELESS
        for t in ("ignores arrays", "ignores strings", "ignores other non-objects")
    },
    **{  # undeclared required names are declared ({}): then object keywords without a type
        ("required.json", "required properties whose names are Javascript object property names", t): TYPELESS
        for t in ("ignores arrays", "ignores other non-objects")
    },
}
"""Valid instances the grammar refuses (sound narrowing), with the reason."""

COMPILE_ERRORS: dict[tuple[str, str], str] = {
    ("anyOf.json", "anyOf with boolean schemas, some true"): FALSE,
    ("prefixItems.json", "prefixItems with boolean schemas"): FALSE,
    ("properties.json", "properties with boolean schema"): FALSE,
}
"""Accepted by the policy, refused by xgrammar at compile time (GrammarCompileError).
("anyOf with boolean schemas, all false" and "$ref to boolean schema false" match no
value at all: the policy refuses them, ``unsatisfiable_schema``.)"""

EXPECTED_TOTALS = {
    "schemas": 368,
    "accepted": 114,  # 113 before $ref targets were hoisted under $defs (rewrites/hoist.py)
    "rejected:remote_ref": 51,
    "rejected:invalid_schema": 2,
    "rejected:unsupported_schema_keyword": 199,
    "rejected:unsatisfiable_schema": 2,
    "compile_errors": 3,
    "instances_matched": 338,
    "narrowing": 22,
}
UNSATISFIABLE = (
    "strict mode: absent items/additionalProperties mean none, so a minimum "
    "above the declared ones cannot be met (compile error: declare items/properties)"
)
PATTERN_ANCHORED = "patterns must match the whole string"
TYPED_NARROWING: dict[tuple[str, ...], str] = {
    ("pattern.json", "pattern is not anchored", "matches a substring"): PATTERN_ANCHORED,
    **{
        (f"max{kind}.json", f"max{kind} validation{decimal}", test): STRICT
        for kind in ("Items", "Properties")
        for decimal in ("", " with a decimal")
        for test in ("shorter is valid", "exact length is valid")
        if not (decimal and test == "exact length is valid")
    },
}
TYPED_COMPILE_ERRORS: dict[tuple[str, str], str] = {
    (f"min{kind}.json", f"min{kind} validation{decimal}"): UNSATISFIABLE
    for kind in ("Items", "Properties")
    for decimal in ("", " with a decimal")
}
TYPED_TOTALS = {
    "schemas": 32,
    "accepted": 27,
    "rejected:unsupported_schema_keyword": 5,
    "compile_errors": 4,
    "instances_matched": 60,
    "narrowing": 7,
}
CHECK_BOUND_S, COMPILE_BOUND_S = 1.0, 5.0


@pytest.fixture(scope="module")
def suite_files() -> list[Path]:
    from assets import schema_suite_dir

    return sorted(schema_suite_dir().glob("*.json"))


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any]:
    from assets import model_dir

    return load_compiler(model_dir("smollm2"))


@dataclass
class Report:
    """What running suite cases through the policy and the compiled grammar found."""

    totals: Counter[str] = field(default_factory=Counter)
    unsound: list[tuple[str, ...]] = field(default_factory=list)
    narrowing: dict[tuple[str, ...], str] = field(default_factory=dict)
    compile_errors: dict[tuple[str, ...], str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _run(cases: list[tuple[str, dict[str, Any]]], smollm2: tuple[Any, Any]) -> Report:
    from sglang.srt.constrained.json_schema_validation import validate_xgrammar_json_schema

    tokenizer, compiler = smollm2
    probes, report = _punctuation_tokens(tokenizer), Report()
    for name, case in cases:
        report.totals["schemas"] += 1
        key = (name, case["description"])
        began = time.perf_counter()
        try:
            checked = check_schema(case["schema"])
        except GrammarError as exc:
            report.totals[f"rejected:{exc.code}"] += 1
            continue
        finally:
            if time.perf_counter() - began > CHECK_BOUND_S:
                report.problems.append(f"{key}: check_schema took too long")
        report.totals["accepted"] += 1
        validate_xgrammar_json_schema(checked.schema)  # raises if SGLang would refuse
        began = time.perf_counter()
        try:
            compiled, warnings = capture_warnings(lambda: compile_text(compiler, "json_schema", checked.canonical))
        except RuntimeError as exc:
            report.compile_errors[key] = str(exc)
            continue
        if time.perf_counter() - began > COMPILE_BOUND_S or warnings:
            report.problems.append(f"{key}: slow compile or xgrammar warnings {warnings}")
        _walk_tests(case["tests"], key, compiled, json.loads(checked.canonical), report, tokenizer, probes)
    return report


def _walk_tests(
    tests: list[dict[str, Any]],
    key: tuple[str, str],
    compiled: Any,
    emitted_as: Any,
    report: Report,
    tokenizer: Any,
    probes: list[int],
) -> None:
    for test in tests:
        text = grammar_text(test["data"], emitted_as)
        walk = walk_tokens(compiled, tokenizer, text)
        if walk.accepted:
            report.problems += _mask_mismatches(compiled, tokenizer, text, probes)
        if walk.accepted == test["valid"]:
            report.totals["instances_matched"] += 1
        elif walk.accepted:
            report.unsound.append((*key, test["description"]))
        else:
            report.narrowing[(*key, test["description"])] = walk.detail


@pytest.mark.timeout(240)
def test_suite(suite_files: list[Path], smollm2: tuple[Any, Any]) -> None:
    cases = [(p.name, c) for p in suite_files for c in json.loads(p.read_text(encoding="utf-8"))]
    report = _run(cases, smollm2)
    report.totals["compile_errors"] = len(report.compile_errors)
    report.totals["narrowing"] = len(report.narrowing)
    print(dict(report.totals))
    assert report.problems == []  # slow, warned, or token mask disagreeing with the matcher
    assert report.unsound == [], "the grammar accepts instances the schema rejects"
    assert sorted(report.narrowing) == sorted(NARROWING)
    assert sorted(report.compile_errors) == sorted(COMPILE_ERRORS)
    assert all("Schema 'false'" in m or "prefixItems must be" in m for m in report.compile_errors.values())
    assert dict(report.totals) == EXPECTED_TOTALS


_TYPED_FILES = {
    "string": ("minLength", "maxLength", "pattern"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties", "patternProperties", "propertyNames"),
}
_PY_TYPES: dict[str, Any] = {"string": str, "number": (int, float), "integer": int, "array": list, "object": dict}


@pytest.mark.timeout(240)
def test_suite_typed_variants(suite_files: list[Path], smollm2: tuple[Any, Any]) -> None:
    """The type-specific keywords' files, with the ``type`` xgrammar needs added at the
    root and only the instances of that type kept (the rest are trivially valid in the
    original and type errors in the variant)."""
    by_name = {p.name: p for p in suite_files}
    cases = []
    for type_, keywords in _TYPED_FILES.items():
        for keyword in keywords:
            for case in json.loads(by_name[f"{keyword}.json"].read_text(encoding="utf-8")):
                tests = [
                    t
                    for t in case["tests"]
                    if isinstance(t["data"], _PY_TYPES[type_])
                    and not isinstance(t["data"], bool)
                    and (type_ != "integer" or t["data"] == int(t["data"]))
                ]
                schema = {**case["schema"], "type": type_}
                cases.append((f"{keyword}.json", {**case, "schema": schema, "tests": tests}))
    report = _run(cases, smollm2)
    report.totals["compile_errors"] = len(report.compile_errors)
    report.totals["narrowing"] = len(report.narrowing)
    print(dict(report.totals), sorted(report.compile_errors))
    assert report.problems == [] and report.unsound == []
    assert sorted(report.narrowing) == sorted(TYPED_NARROWING)
    assert sorted(report.compile_errors) == sorted(TYPED_COMPILE_ERRORS)
    assert dict(report.totals) == TYPED_TOTALS


def _punctuation_tokens(tokenizer: Any) -> list[int]:
    """Short tokens made of JSON punctuation, digits and spaces: where mask bugs show."""
    keep = set('{}[],":0123456789 ')
    return [i for i in range(len(tokenizer)) if 0 < len(piece := tokenizer.decode([i])) <= 4 and set(piece) <= keep]


def _mask_mismatches(compiled: Any, tokenizer: Any, text: str, probes: list[int]) -> list[str]:
    """Along ``text``'s tokens, every probe token the bitmask allows must be accepted by
    the matcher and vice versa (xgrammar 0.2.7 breaks this for ``$ref: "#"``)."""
    import xgrammar

    from tools.grammar_check import _allowed

    matcher = xgrammar.GrammarMatcher(compiled)
    bitmask = xgrammar.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    found = []
    for step, token in enumerate([*tokenizer.encode(text, add_special_tokens=False), None]):
        matcher.fill_next_token_bitmask(bitmask)
        found += [
            f"{text!r} step {step}: {tokenizer.decode([p])!r}"
            for p in probes
            if _allowed(bitmask, p) != matcher.fork().accept_token(p)
        ]
        if token is not None:
            matcher.accept_token(token)
    return found

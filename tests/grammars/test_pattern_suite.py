"""The JSON-Schema-Test-Suite's regex cases with RE2 for the regexes (grammars.json_schema.validation): the
verdicts of jsonschema's own validator (Python's ``re``) on the keywords that match regexes, and
the suite's ECMA-262 verdicts where Python's ``re`` errs or differs."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from grammars.json_schema import LinearValidator

REGEX_FILES = ("pattern.json", "patternProperties.json", "additionalProperties.json",
               "unevaluatedProperties.json", "propertyNames.json")  # fmt: skip
ECMA_FILES = ("optional/ecmascript-regex.json", "optional/non-bmp-regex.json")


def _cases(names: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    from assets import schema_suite_dir

    return [(name, case) for name in names for case in json.loads((schema_suite_dir() / name).read_text())]


def test_the_suites_regex_keywords_get_jsonschemas_verdicts():
    """The draft 2020-12 suite's files whose keywords match regexes: with RE2 for the regexes,
    every instance gets the verdict of jsonschema's own validator (Python's ``re``)."""
    compared, wrong = 0, []
    for name, case in _cases(REGEX_FILES):
        linear, python = LinearValidator(case["schema"]), Draft202012Validator(case["schema"])
        for test in case["tests"]:
            compared += 1
            if linear.is_valid(test["data"]) != python.is_valid(test["data"]):
                wrong.append((name, case["description"], test["description"]))
    assert compared >= 150, compared
    assert not wrong, wrong


def test_the_suites_ecma_262_regex_cases():
    """The suite's ECMA-262 regex cases (where Python's ``re`` errs or differs: ``\\d``/``\\w``
    ASCII, ``\\s`` Unicode, ``\\cX``, ``\\p{Letter}``, astral characters): RE2 gives the
    suite's verdict on every one."""
    compared, wrong = 0, []
    for name, case in _cases(ECMA_FILES):
        linear = LinearValidator(case["schema"])
        for test in case["tests"]:
            compared += 1
            if linear.is_valid(test["data"]) != test["valid"]:
                wrong.append((name, case["description"], test["description"]))
    assert compared >= 70, compared
    assert not wrong, wrong

"""``loosen_deferred`` (the service's fallback for a schema only llguidance's own compiler may take)
is what ``check_schema(schema, allow_loosening=True)`` returns, without the second policy run: checked
over every schema of the JSON-Schema-Test-Suite (draft2020-12) whose check defers keywords."""

from __future__ import annotations

import json

import pytest

from assets import schema_suite_dir
from grammars.errors import GrammarError
from grammars.json_schema import check_schema, loosen_deferred


def _outcome(call):
    try:
        return call()
    except GrammarError as exc:
        return type(exc).__name__, exc.message


def test_loosen_deferred_equals_the_policy_run_with_loosening():
    compared = 0
    for path in sorted(schema_suite_dir().glob("*.json")):
        for group in json.loads(path.read_text()):
            schema = group["schema"]
            if not isinstance(schema, dict):
                continue
            try:
                deferred = check_schema(schema, defer_unsupported=True)
            except GrammarError:
                continue
            if not deferred.unenforced:
                continue
            compared += 1
            expected = _outcome(lambda: check_schema(schema, allow_loosening=True))
            assert _outcome(lambda: loosen_deferred(deferred)) == expected, (path.name, group["description"])
    assert compared >= 50, compared  # measured: 199


@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}])
def test_nothing_deferred_is_returned_as_it_is(schema):
    checked = check_schema(schema, defer_unsupported=True)
    assert loosen_deferred(checked) is checked

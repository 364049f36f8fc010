"""Choice stage helper: post-validation of JSON output against the client's schema (Draft 2020-12;
its regexes matched by RE2 in linear time, ``grammars.json_schema.validation``).

With strict decoding a failure should only happen on truncation; when it happens
anyway it is counted and shown on the choice (``schema_validation``), never hidden.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from grammars.json_schema import first_error
from service.metrics import SCHEMA_VALIDATION_FAILURES
from service.protocol.openai import CustomToolCall, SchemaValidation, ToolCall
from service.types.plan import DecodeConstraint


def validate_output(text: str, constraint: DecodeConstraint | None, finish_reason: str) -> SchemaValidation | None:
    """None when there is nothing to validate (no JSON constraint); failures are counted."""
    result = _check(text, constraint, finish_reason)
    if result is not None and not result.valid:
        SCHEMA_VALIDATION_FAILURES.labels(reason="truncated" if finish_reason == "length" else "invalid").inc()
    return result


def validate_calls(
    calls: Sequence[ToolCall | CustomToolCall], complete: int, schema_of: Callable[[str], Any], finish_reason: str
) -> SchemaValidation | None:
    """The arguments of each complete call against its tool's ``parameters`` (None: no
    calls). A call cut off by max_tokens (index ``complete``) is reported as truncated."""
    if not calls:
        return None
    result = SchemaValidation(valid=True)
    for call in calls[:complete]:
        if not isinstance(call, ToolCall):  # a custom tool's input: its grammar was enforced
            continue
        schema = schema_of(call.function.name)
        error = None if schema is None else _first_error(json.loads(call.function.arguments), schema)
        if error is not None:
            result = SchemaValidation(valid=False, error=f"tool call {call.id} ({call.function.name}) {error}")
            break
    if result.valid and len(calls) > complete:
        result = SchemaValidation(
            valid=False, error="tool call truncated by max_tokens before its arguments were complete"
        )
    if not result.valid:
        SCHEMA_VALIDATION_FAILURES.labels(reason="truncated" if finish_reason == "length" else "invalid").inc()
    return result


def with_ignored(result: SchemaValidation | None, constraint: DecodeConstraint | None) -> SchemaValidation | None:
    """``result`` naming the schema's unknown keywords (annotations the grammar and the
    validation ignored), when there are any."""
    if result is None or constraint is None or not constraint.ignored:
        return result
    return result.model_copy(update={"ignored_keywords": list(constraint.ignored)})


def _first_error(value: Any, schema: Any) -> str | None:
    error = first_error(value, schema)  # RE2 for the schema's regexes: linear in the output
    if error is None:
        return None
    return "at /" + "/".join(str(p) for p in error.absolute_path) + f": {error.message}"


def _check(text: str, constraint: DecodeConstraint | None, finish_reason: str) -> SchemaValidation | None:
    if constraint is None or constraint.validate_schema is None:
        return None
    if finish_reason == "length":
        return SchemaValidation(valid=False, error="output truncated by max_tokens before the JSON was complete")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return SchemaValidation(valid=False, error=f"output is not valid JSON: {exc}")
    error = _first_error(value, constraint.validate_schema)
    return SchemaValidation(valid=error is None, error=error)

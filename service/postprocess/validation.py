"""Post-validation of JSON output against the client's schema (Draft 2020-12).

With strict decoding a failure should only happen on truncation; when it happens
anyway it is counted and shown on the choice (``schema_validation``), never hidden.
"""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from service.metrics import SCHEMA_VALIDATION_FAILURES
from service.pipeline.types import DecodeConstraint
from service.protocol.openai import SchemaValidation


def validate_output(text: str, constraint: DecodeConstraint | None, finish_reason: str) -> SchemaValidation | None:
    """None when there is nothing to validate (no JSON constraint); failures are counted."""
    result = _check(text, constraint, finish_reason)
    if result is not None and not result.valid:
        SCHEMA_VALIDATION_FAILURES.labels(reason="truncated" if finish_reason == "length" else "invalid").inc()
    return result


def _check(text: str, constraint: DecodeConstraint | None, finish_reason: str) -> SchemaValidation | None:
    if constraint is None or constraint.validate_schema is None:
        return None
    if finish_reason == "length":
        return SchemaValidation(valid=False, error="output truncated by max_tokens before the JSON was complete")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return SchemaValidation(valid=False, error=f"output is not valid JSON: {exc}")
    error = next(iter(Draft202012Validator(constraint.validate_schema).iter_errors(value)), None)
    if error is None:
        return SchemaValidation(valid=True)
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return SchemaValidation(valid=False, error=f"at {where}: {error.message}")

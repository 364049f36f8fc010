"""Constraints stage: what the client asked for -> the grammar the engine enforces.

The schema policy (grammars/) is fail-closed: a keyword the grammar cannot enforce
exactly is a 400 unless the caller (or the server config) opted into loosening.
"""

from __future__ import annotations

from grammars.errors import GrammarError
from grammars.json_schema import JSON_OBJECT_SCHEMA, check_schema
from service.pipeline.types import DecodeConstraint, ValidatedRequest

SCHEMA_PARAM = "response_format.json_schema.schema"


def build_constraint(req: ValidatedRequest, default_loosening: bool) -> DecodeConstraint | None:
    """None when the output is free text; raises GrammarError (param set) otherwise."""
    spec = req.json_output
    if spec is None:
        return None
    if spec.schema is None:
        checked = check_schema(JSON_OBJECT_SCHEMA)
        return DecodeConstraint(
            "json_schema", checked.canonical, validate_schema=JSON_OBJECT_SCHEMA, param="response_format"
        )
    loosen = default_loosening if spec.allow_loosening is None else spec.allow_loosening
    try:
        checked = check_schema(spec.schema, allow_loosening=loosen)
    except GrammarError as exc:
        raise exc.with_param(SCHEMA_PARAM) from None
    return DecodeConstraint(
        "json_schema",
        checked.canonical,
        validate_schema=spec.schema,
        loosened=tuple(f"{u.keyword} at {u.pointer or '/'}" for u in checked.loosened),
        param=SCHEMA_PARAM,
    )

"""Validate stage, output part (used by ``validate.py`` only): which constraint the client put
on the answer text, from whichever field it used -> ``JsonOutputSpec`` | ``PatternOutputSpec``.

Fields: OpenAI's ``response_format`` (``json_object``, ``json_schema``; structserve adds the
types ``regex``, ``choice``, ``grammar``), vLLM's ``structured_outputs`` (exactly one of
``json``, ``json_object``, ``regex``, ``choice``, ``grammar``), SGLang's top-level ``regex`` and
``ebnf``. One request carries at most one of them; anything else is a 400 naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from service.errors import InvalidRequestError
from service.protocol.completions import CompletionRequest
from service.protocol.openai import ChatCompletionRequest, ResponseFormat, StructuredOutputs
from service.types.request import JsonOutputSpec, PatternOutputSpec

OutputSpec = JsonOutputSpec | PatternOutputSpec
_PATTERN_FIELDS = ("regex", "choice", "grammar")


def output_spec(req: ChatCompletionRequest | CompletionRequest) -> OutputSpec | None:
    """The one output constraint of ``req`` (None: free text)."""
    found = [
        (field, spec)
        for field, spec in (
            ("response_format", _response_format(req.response_format)),
            ("structured_outputs", _structured(req.structured_outputs)),
            ("regex", _pattern("regex", "regex", req.regex)),
            ("ebnf", _pattern("grammar", "ebnf", req.ebnf)),
        )
        if spec is not None
    ]
    if len(found) > 1:
        names = " and ".join(f"'{field}'" for field, _ in found)
        raise InvalidRequestError(
            f"{names} both constrain the output; send only one of them", param=found[1][0], code="conflicting_fields"
        )
    return found[0][1] if found else None


def _response_format(fmt: ResponseFormat | None) -> OutputSpec | None:
    if fmt is None:
        return None
    extra = [f for f in ("json_schema", *_PATTERN_FIELDS) if getattr(fmt, f) is not None and f != fmt.type]
    if extra:
        raise InvalidRequestError(
            f"'response_format.{extra[0]}' is only allowed with type '{extra[0]}', not '{fmt.type}'",
            param=f"response_format.{extra[0]}",
        )
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return JsonOutputSpec(schema=None, name=None, param="response_format")
    if fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise InvalidRequestError(
                "response_format type 'json_schema' needs 'json_schema': {'name': ..., 'schema': {...}}",
                param="response_format.json_schema.schema",
            )
        return JsonOutputSpec(schema=fmt.json_schema.schema_, name=fmt.json_schema.name)
    value = getattr(fmt, fmt.type)
    if value is None:
        raise InvalidRequestError(
            f"response_format type '{fmt.type}' needs the field '{fmt.type}'", param=f"response_format.{fmt.type}"
        )
    return _pattern(fmt.type, f"response_format.{fmt.type}", value)


def _structured(so: StructuredOutputs | None) -> OutputSpec | None:
    if so is None:
        return None
    given = [f for f in ("json", "json_object", *_PATTERN_FIELDS) if _so_value(so, f) is not None]
    if len(given) != 1:
        raise InvalidRequestError(
            "'structured_outputs' takes exactly one of json, json_object, regex, choice, grammar"
            + (f"; got {', '.join(given)}" if given else ""),
            param="structured_outputs",
        )
    field = given[0]
    value = _so_value(so, field)
    if field == "json_object":
        if value is not True:
            raise InvalidRequestError(
                "'structured_outputs.json_object' must be true (leave it out for free text)",
                param="structured_outputs.json_object",
            )
        return JsonOutputSpec(schema=None, name=None, param="structured_outputs.json_object")
    if field == "json":
        return JsonOutputSpec(schema=_schema(value), name=None, param="structured_outputs.json")
    return _pattern(field, f"structured_outputs.{field}", value)


def _so_value(so: StructuredOutputs, field: str) -> Any:
    return so.json_ if field == "json" else getattr(so, field)


def _schema(value: Any) -> dict[str, Any] | bool:
    """vLLM takes the schema as an object or as JSON text."""
    if not isinstance(value, str):
        return value  # type: ignore[no-any-return]
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise InvalidRequestError(
            f"'structured_outputs.json' is a string but not JSON ({exc}); send the schema as an object",
            param="structured_outputs.json",
        ) from None
    if not isinstance(parsed, (dict, bool)):
        raise InvalidRequestError(
            "'structured_outputs.json' must be a JSON Schema (an object or a boolean)", param="structured_outputs.json"
        )
    return parsed


def _pattern(kind: str, param: str, value: Any) -> PatternOutputSpec | None:
    if value is None:
        return None
    if kind == "choice":
        choices = tuple(value)
        if not choices or any(c == "" for c in choices):
            raise InvalidRequestError(
                f"'{param}' needs at least one choice, and no empty string", param=param, code="invalid_choice"
            )
        return PatternOutputSpec("choice", param, choices=choices)
    if not value.strip():
        raise InvalidRequestError(f"'{param}' is empty; give a {kind}", param=param)
    return PatternOutputSpec("regex" if kind == "regex" else "grammar", param, text=value)

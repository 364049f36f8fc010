"""Draft 2020-12 validation of values against client schemas, with every regex matched by RE2.

``LinearValidator`` is jsonschema's ``Draft202012Validator`` with the four keywords that match a
schema's regexes replaced (``jsonschema.validators.extend``): ``pattern``, ``patternProperties``,
``additionalProperties`` and ``unevaluatedProperties`` (the last two skip keys a
``patternProperties`` regex matches). Each uses ``grammars.json_schema.patterns.search`` instead of Python's
``re``, so validating a value takes time linear in it whatever the patterns. A pattern RE2 cannot
run (refused by the policy before this point) fails validation with a message saying so.
Everything else is jsonschema's own code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from grammars.json_schema.patterns import PatternError, search

__all__ = ["LinearValidator", "first_error"]


def extras_msg(extras: list[str]) -> tuple[str, str]:
    """jsonschema's wording for a list of extra keys."""
    return ", ".join(repr(extra) for extra in extras), "was" if len(extras) == 1 else "were"


def _matches(pattern: str, text: str) -> bool:
    try:
        return search(pattern, text)
    except PatternError:
        return False


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = search(pattern, instance)
    except PatternError as exc:
        yield ValidationError(f"the pattern {pattern!r} cannot be checked: {exc}")
        return
    if not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    declared, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    return [k for k in instance if k not in declared and not any(_matches(p, k) for p in patterns)]


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        if "patternProperties" in schema:
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            listed = ", ".join(repr(e) for e in sorted(extras))
            yield ValidationError(
                f"{listed} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: {patterns}"
            )
        else:
            yield ValidationError(
                "Additional properties are not allowed (%s %s unexpected)" % extras_msg(sorted(extras))
            )


def _valid(validator: Any, instance: Any, schema: Any) -> bool:
    return next(validator.descend(instance, schema), None) is None


def _evaluated_keys(validator: Any, instance: dict[str, Any], schema: Any) -> set[str]:
    """The keys of ``instance`` that ``schema`` evaluates (jsonschema's
    ``find_evaluated_property_keys_by_schema``, with RE2 for ``patternProperties``)."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for ref_keyword in ("$ref", "$dynamicRef"):
        if isinstance(schema.get(ref_keyword), str):
            resolved = validator._resolver.lookup(schema[ref_keyword])
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys |= _evaluated_keys(inner, instance, resolved.contents)
    if validator.is_type(schema.get("properties"), "object"):
        keys |= schema["properties"].keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if keyword in schema:
            keys |= {k for k, v in instance.items() if _valid(validator, v, schema[keyword])}
    for pattern in schema.get("patternProperties", {}):
        keys |= {k for k in instance if _matches(pattern, k)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator, instance, subschema):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        branches = ["if", "then"] if _valid(validator, instance, schema["if"]) else ["else"]
        for branch in (schema[b] for b in branches if b in schema):
            keys |= _evaluated_keys(validator, instance, branch)
    return keys


def _unevaluated_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    bad = [
        k
        for k in instance
        if k not in evaluated and next(validator.descend(instance[k], allowed, path=k, schema_path=k), None)
    ]
    if bad and allowed is False:
        yield ValidationError("Unevaluated properties are not allowed (%s %s unexpected)" % extras_msg(sorted(bad)))
    elif bad:
        yield ValidationError(
            "Unevaluated properties are not valid under the given schema (%s %s unevaluated and invalid)"
            % extras_msg(bad)
        )


LinearValidator: Any = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
    },
)


def first_error(value: Any, schema: Any) -> ValidationError | None:
    """The first error of ``value`` against ``schema`` (Draft 2020-12, RE2 for patterns; an array
    ``items`` read as the drafts before 2020-12 define it, as the policy restates it), or None."""
    from grammars.json_schema.rewrites.legacy import legacy_items  # rewrites import this module

    return next(iter(LinearValidator(legacy_items(schema)[0]).iter_errors(value)), None)

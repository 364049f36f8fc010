"""Per-subschema rules of the keyword policy (``grammars.json_schema.policy.check_schema``).

Pure: imports neither torch, sglang, fastapi nor xgrammar. ``node_problems`` lists
what xgrammar would not enforce exactly in one subschema object; the evidence for
each rule is ``KEYWORDS.md`` and ``tests/grammars/test_schema_suite.py``.
"""

from __future__ import annotations

import json
from typing import Any

from grammars.errors import Unsupported
from grammars.json_schema.access import member_dict, member_list
from grammars.json_schema.canonical import Node, json_equal, pattern_problem
from grammars.json_schema.keywords import (
    _APPLICATORS,
    _INFERRED_BY,
    _NAME_KEYWORDS,
    _NEEDS_TYPE,
    _NEUTRAL,
    _STRING_GROUPS,
    KEYWORDS,
    SGLANG_FORMATS,
)
from grammars.json_schema.patterns import PatternError, search


def node_problems(node: Node, root: dict[str, Any]) -> list[Unsupported]:
    """The policy for one subschema object, de-duplicated by keyword."""
    value, pointer = node.value, node.pointer
    found = [
        *_keyword_problems(value, pointer, node.names),
        *_applicator_problems(value, pointer),
        *([] if node.names else _type_problems(value, pointer)),
        *(_string_problems(value, pointer) if node.names or _may_be(value, "string") else []),
        *(_object_problems(value, pointer) if _may_be(value, "object") else []),
        *_value_problems(value, pointer, root),
    ]
    unique: dict[str, Unsupported] = {}
    for problem in found:
        unique.setdefault(problem.keyword, problem)
    return list(unique.values())


def _keyword_problems(value: dict[str, Any], pointer: str, names: bool) -> list[Unsupported]:
    """Unknown and table-unsupported keywords, nested ``$id``, propertyNames content."""
    out = []
    for key in value:
        row = KEYWORDS.get(key)
        if row is None:
            out.append(
                Unsupported(
                    key,
                    pointer,
                    "unknown keyword: xgrammar does not enforce it; remove it or express it with supported keywords",
                )
            )
        elif row.status == "unsupported":
            out.append(Unsupported(key, pointer, f"{row.note}; remove it"))
        elif names and key not in _NAME_KEYWORDS:
            out.append(
                Unsupported(
                    key,
                    pointer,
                    "inside propertyNames only type, pattern, "
                    "minLength, maxLength, format, enum and const are enforced",
                )
            )
    if "$id" in value and pointer:
        out.append(
            Unsupported("$id", pointer, "a nested $id changes how $ref resolves, which xgrammar ignores; remove it")
        )
    if names and value.get("type", "string") not in ("string", ["string"]):
        out.append(Unsupported("type", pointer, 'property names are strings: use "type": "string" or omit type'))
    return out


def _applicator_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """One of $ref/anyOf/oneOf/allOf, alone; allOf with one branch; oneOf disjoint."""
    present = [k for k in _APPLICATORS if k in value]
    if not present:
        return []
    first = present[0]
    where = "the referenced schema" if first == "$ref" else f"each {first} branch"
    out = [
        Unsupported(
            k,
            pointer,
            f"only one of $ref/anyOf/oneOf/allOf per subschema is enforced (`{first}` is); nest `{k}` inside {where}",
        )
        for k in present[1:]
    ]
    out += [
        Unsupported(k, pointer, f"ignored by xgrammar next to `{first}`; move it into {where}")
        for k in value
        if k not in _NEUTRAL and k not in _APPLICATORS
    ]
    branches = value[first] if isinstance(value[first], list) else []
    if first == "allOf" and len(branches) > 1:
        out.append(
            Unsupported(
                "allOf", pointer, "xgrammar does not intersect several allOf branches; merge them into one schema"
            )
        )
    # the rewrite turned every oneOf the client's branches prove disjoint into anyOf; what is
    # left is unproven, or a $ref points into it (the proof needs the client's branches)
    if first == "oneOf" and len(branches) > 1:
        out.append(
            Unsupported(
                "oneOf",
                pointer,
                "the branches are not provably disjoint (a grammar enforces anyOf, not 'exactly one'); "
                "give them distinct types or const/enum values, a required const/enum discriminator "
                "property, or a required property the other branches forbid (additionalProperties: "
                "false), or use anyOf",
            )
        )
    return out


def _may_be(value: dict[str, Any], kind: str) -> bool:
    """Whether instances of JSON type ``kind`` can reach this subschema's keywords
    (no ``type``, or a ``type`` that includes it)."""
    raw = value.get("type")
    return raw is None or raw == kind or (isinstance(raw, list) and kind in raw)


def _type_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """Type-specific keywords in a subschema without ``type``: xgrammar ignores them
    (unless it infers objects/arrays from ``properties``/``items`` & co.). With a type
    that excludes their kind they are irrelevant, hence exact."""
    if "type" in value:
        return []
    return [
        Unsupported(
            key,
            pointer,
            f'only enforced when the subschema declares "type": "{_NEEDS_TYPE[key]}" (xgrammar ignores it otherwise)',
        )
        for key in value
        if key in _NEEDS_TYPE and not any(k in value for k in _INFERRED_BY.get(_NEEDS_TYPE[key], ()))
    ]


def _string_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """format values, one string-constraint group per subschema, pattern safety."""
    out = []
    fmt = value.get("format")
    if fmt is not None and fmt not in SGLANG_FORMATS:
        out.append(
            Unsupported(
                "format",
                pointer,
                f"format {fmt!r} is not enforced; use one of {', '.join(sorted(SGLANG_FORMATS))}, or a pattern",
            )
        )
    groups = [g for g in _STRING_GROUPS if any(k in value for k in g)]
    out += [
        Unsupported(
            k,
            pointer,
            f"xgrammar cannot enforce it together with "
            f"`{groups[0][0]}`; keep one of format, pattern, minLength/maxLength",
        )
        for group in groups[1:]
        for k in group
        if k in value
    ]
    pattern = value.get("pattern")
    reason = pattern_problem(pattern) if isinstance(pattern, str) else None
    if reason:
        out.append(Unsupported("pattern", pointer, reason))
    return out


def _object_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """required names, patternProperties, propertyNames, minProperties."""
    props = member_dict(value, "properties")
    out = []
    required = member_list(value, "required")
    missing = [n for n in required if n not in props]
    if missing:
        out.append(
            Unsupported(
                "required",
                pointer,
                f"{missing} not declared in properties; xgrammar ignores such names: declare them under properties",
            )
        )
    patterns = value.get("patternProperties")
    if isinstance(patterns, dict) and patterns:
        reason = _pattern_properties_problem(patterns, props)
        if reason:
            out.append(Unsupported("patternProperties", pointer, reason))
    if "propertyNames" in value and (props or not isinstance(value["propertyNames"], dict)):
        out.append(
            Unsupported(
                "propertyNames",
                pointer,
                "only enforced as a schema object and without properties beside it (declared names bypass it)",
            )
        )
    extra_keys = any(k in value for k in ("patternProperties", "propertyNames")) or any(
        value.get(k, False) is not False for k in ("additionalProperties", "unevaluatedProperties")
    )
    if "minProperties" in value and extra_keys:
        out.append(
            Unsupported(
                "minProperties",
                pointer,
                "xgrammar may repeat undeclared keys, so the count is not exact; set additionalProperties: false",
            )
        )
    return out


def implies(schema: Any, other: Any) -> bool:
    """Whether every instance of ``schema`` is one of ``other``, read off their keywords:
    ``other`` admits everything, or each of its assertions is in ``schema`` with the same value
    (``type``: ``schema``'s types among ``other``'s)."""
    if other is True or other == {}:
        return True
    if not isinstance(schema, dict) or not isinstance(other, dict):
        return False
    for key, want in other.items():
        if key in _NEUTRAL:
            continue
        have = schema.get(key)
        if key == "type" and have is not None:
            mine, theirs = _types(have), _types(want)
            if not mine <= theirs | ({"integer"} if "number" in theirs else set()):
                return False
        elif key not in schema or not json_equal(have, want):
            return False
    return True


def _types(raw: Any) -> set[str]:
    return {raw} if isinstance(raw, str) else {t for t in raw if isinstance(t, str)} if isinstance(raw, list) else set()


def _pattern_properties_problem(patterns: dict[str, Any], props: dict[str, Any]) -> str | None:
    if len(patterns) > 1:
        return "xgrammar applies only one matching pattern per key: use a single pattern"
    pattern = next(iter(patterns))
    reason = pattern_problem(pattern)
    if reason:
        return reason
    try:
        clash = [name for name in props if search(pattern, name) and not implies(props[name], patterns[pattern])]
    except PatternError:
        return None  # check_patterns refuses it
    if clash:
        return (
            f"declared properties {clash} also match {pattern!r}; xgrammar checks them "
            "against their property schema only"
        )
    return None


def _value_problems(value: dict[str, Any], pointer: str, root: Any) -> list[Unsupported]:
    """enum/const values must satisfy their siblings (xgrammar emits only the values)."""
    from grammars.json_schema.validation import LinearValidator

    out = []
    for key in ("const", "enum"):
        rest = {k: v for k, v in value.items() if k != key}
        if key not in value or all(k in _NEUTRAL for k in rest):
            continue
        values = [value["const"]] if key == "const" else value[key]
        try:
            validator = LinearValidator(root).evolve(schema=rest)
            bad = next((v for v in values if not validator.is_valid(v)), _OK)
        except (RecursionError, LookupError, ValueError, TypeError):
            bad = "(could not check)"
        if bad is not _OK:
            out.append(
                Unsupported(
                    key,
                    pointer,
                    f"value {json.dumps(bad)[:60]} violates the sibling keywords, which xgrammar ignores next to {key}",
                )
            )
    return out


_OK = object()

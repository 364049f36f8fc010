"""Fail-closed JSON-Schema policy for xgrammar 0.2.7 as SGLang 0.5.23 calls it.

Pure: imports neither torch, sglang, fastapi nor xgrammar. ``check_schema`` accepts a
schema only if every keyword in it is enforced exactly (or only narrowed: the grammar
may emit a subset of the valid instances, never an invalid one) by
``GrammarCompiler.compile_json_schema(schema, any_whitespace=False, strict_mode=True)``
(what SGLang does with ``constrained_json_disable_any_whitespace=True``). The evidence
is ``KEYWORDS.md`` and ``tests/grammars/test_schema_suite.py``; ``KEYWORDS`` below is
the table. Everything not in the table is an unknown keyword: unsupported.

Decisions:
- The root must be a JSON object; boolean root schemas are ``InvalidSchemaError``
  (use ``{}`` for "any JSON value"). Boolean subschemas are fine where xgrammar
  handles them (``false`` elsewhere fails at compile: ``GrammarCompileError``).
- ``$ref``: only ``#/...`` pointers through object members without ``~``/``%``
  escapes; recursion through ``$defs`` is supported. ``"#"`` (root recursion: xgrammar's
  token mask then refuses valid tokens) and other ``#...`` fragments (anchors) are
  unsupported; anything else is ``RemoteRefError``.
- Always Draft 2020-12, whatever ``$schema`` says.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grammars.canonical import (
    Node,
    branches_disjoint,
    canonical_json,
    iter_subschemas,
    json_depth_exceeds,
    pattern_problem,
    resolve_pointer,
)
from grammars.errors import (
    InvalidSchemaError,
    RemoteRefError,
    SchemaTooComplexError,
    Unsupported,
    UnsupportedKeywordError,
)
from grammars.keywords import (  # noqa: F401  (KeywordSupport, KEYWORDS, SGLANG_FORMATS re-exported)
    KeywordSupport,
    KEYWORDS,
    SGLANG_FORMATS,
    _APPLICATORS,
    _NEUTRAL,
    _NAME_KEYWORDS,
    _NEEDS_TYPE,
    _INFERRED_BY,
    _STRING_GROUPS,
)

__all__ = [
    "JSON_OBJECT_SCHEMA",
    "KEYWORDS",
    "SGLANG_FORMATS",
    "CheckedSchema",
    "KeywordSupport",
    "SchemaLimits",
    "Unsupported",
    "check_schema",
]

JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
"""``response_format: json_object``: any JSON object (xgrammar: ``{`` ... ``}`` with any
members and values)."""

_MAX_LOOSEN_ROUNDS = 3


@dataclass(frozen=True)
class SchemaLimits:
    """Bounds checked before anything expensive.

    Attributes:
        max_depth: subschemas nested deeper than this (root = 1) are rejected.
        max_nodes: at most this many subschemas (objects and booleans) in total.
        max_enum_values: at most this many values in one ``enum``.
        max_bytes: at most this many bytes of compact UTF-8 JSON.
        max_json_depth: raw JSON nesting bound (also inside ``const``/``default``
            data), checked first so deep input can never exhaust the stack.
    """

    max_depth: int = 32
    max_nodes: int = 5000
    max_enum_values: int = 1000
    max_bytes: int = 200_000
    max_json_depth: int = 128


@dataclass(frozen=True)
class CheckedSchema:
    """A schema the grammar enforces exactly.

    Attributes:
        schema: the schema to compile: the input object itself when nothing was
            loosened, else a new copy without the ``loosened`` keywords.
        canonical: ``canonical_json(schema)``: what to compile, and the cache key.
        loosened: the keywords dropped (empty unless ``allow_loosening``).
    """

    schema: dict[str, Any]
    canonical: str
    loosened: tuple[Unsupported, ...] = ()


def check_schema(
    schema: Any, *, limits: SchemaLimits = SchemaLimits(), allow_loosening: bool = False
) -> CheckedSchema:
    """Check ``schema`` against the limits, the 2020-12 metaschema and the keyword policy.

    Raises (in this order of checks): ``InvalidSchemaError`` for a non-object root;
    ``SchemaTooComplexError`` beyond ``limits``; ``InvalidSchemaError`` for a metaschema
    violation or a dangling local ``$ref``; ``RemoteRefError``; and, unless
    ``allow_loosening``, ``UnsupportedKeywordError`` listing every unsupported keyword
    occurrence. With ``allow_loosening`` those are removed from a copy instead and
    listed in ``CheckedSchema.loosened``. Never mutates ``schema``; milliseconds for
    schemas within the default limits.
    """
    if not isinstance(schema, dict):
        hint = "use {} for any JSON value" if schema is True else "send a JSON object"
        raise InvalidSchemaError(
            f"the schema must be a JSON object, got {type(schema).__name__}: {hint}", pointer=""
        )
    _check_limits(schema, limits)
    _check_metaschema(schema)
    problems = _problems(schema)
    if not problems:
        return CheckedSchema(schema, canonical_json(schema))
    if not allow_loosening:
        raise UnsupportedKeywordError(problems)
    return _loosen(schema, problems)


def _check_limits(schema: dict[str, Any], limits: SchemaLimits) -> None:
    """Raw nesting, then subschema depth / count / enum sizes, then bytes."""
    deep = json_depth_exceeds(schema, limits.max_json_depth)
    if deep is not None:
        _too_complex(f"it is nested deeper than {limits.max_json_depth} JSON levels", deep)
    count = 0
    for node in iter_subschemas(schema):
        count += 1
        if node.depth > limits.max_depth:
            _too_complex(f"subschemas are nested deeper than {limits.max_depth} levels",
                         node.pointer)
        if count > limits.max_nodes:
            _too_complex(f"it has more than {limits.max_nodes} subschemas", node.pointer)
        enum = node.value.get("enum") if isinstance(node.value, dict) else None
        if isinstance(enum, list) and len(enum) > limits.max_enum_values:
            _too_complex(f"an enum has {len(enum)} values (limit {limits.max_enum_values})",
                         node.pointer, "enum")
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise InvalidSchemaError(f"the schema is not JSON data: {exc}", pointer="") from None
    if size > limits.max_bytes:
        _too_complex(f"it is {size} bytes (limit {limits.max_bytes})", "")


def _too_complex(what: str, pointer: str, keyword: str | None = None) -> None:
    where = pointer if len(pointer) <= 120 else pointer[:120] + "..."
    raise SchemaTooComplexError(
        f"the schema is too complex: {what} (at {where or '/'}). Simplify it: flatten "
        "nesting, split it, or move large enums into a pattern.",
        pointer=pointer, keyword=keyword,
    )


def _check_metaschema(schema: dict[str, Any]) -> None:
    """``InvalidSchemaError`` at the best-matching metaschema violation (pointer = the
    offending value's location, keyword = its last path element when a name)."""
    from jsonschema.exceptions import best_match

    error = best_match(_metaschema_validator().iter_errors(schema))
    if error is None:
        return
    path = list(error.absolute_path)
    pointer = "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in path)
    keyword = path[-1] if path and isinstance(path[-1], str) else None
    raise InvalidSchemaError(
        f"not a valid JSON Schema (Draft 2020-12) at {pointer or '/'}: {error.message}. "
        "Fix that value.",
        pointer=pointer, keyword=keyword,
    )


@functools.cache
def _metaschema_validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(Draft202012Validator.META_SCHEMA)


def _problems(schema: dict[str, Any]) -> list[Unsupported]:
    """Every unsupported occurrence; raises for remote / dangling refs."""
    nodes = list(iter_subschemas(schema))
    locations = {n.pointer for n in nodes}
    problems: list[Unsupported] = []
    for node in nodes:
        if isinstance(node.value, dict):
            problems.extend(_check_ref(node, schema, locations))
            problems.extend(_node_problems(node, schema))
    return problems


def _check_ref(node: Node, root: dict[str, Any], locations: set[str]) -> list[Unsupported]:
    ref = node.value.get("$ref")
    if not isinstance(ref, str):
        return []
    if not ref.startswith("#"):
        raise RemoteRefError(
            f"$ref {ref!r} at {node.pointer or '/'} is not local; only references into the "
            "same schema (\"#/$defs/...\") are allowed: inline the referenced schema "
            "under $defs", pointer=node.pointer, keyword="$ref",
        )
    if ref != "#" and not ref.startswith("#/"):
        return [Unsupported("$ref", node.pointer, "references to $anchor names are not "
                            "resolved by xgrammar; use a JSON pointer like #/$defs/name")]
    if ref == "#":
        return [Unsupported("$ref", node.pointer, "recursion through the root makes xgrammar's "
                            "token mask refuse valid tokens such as `}}`; move the schema to "
                            "$defs/<name> and use {\"$ref\": \"#/$defs/<name>\"} everywhere")]
    if "~" in ref or "%" in ref:
        return [Unsupported("$ref", node.pointer, "xgrammar does not decode ~0/~1/% escapes "
                            "in $ref; rename the target to plain characters")]
    try:
        resolve_pointer(root, ref[1:], members_only=True)
    except KeyError:
        try:
            resolve_pointer(root, ref[1:])
        except KeyError:
            pass
        else:
            return [Unsupported("$ref", node.pointer, "xgrammar resolves $ref only through "
                                "non-empty object member names; point at a schema in $defs")]
        raise InvalidSchemaError(
            f"$ref {ref!r} at {node.pointer or '/'} points at nothing in the schema; fix "
            "the pointer or add the target", pointer=node.pointer, keyword="$ref",
        ) from None
    if ref[1:] not in locations:
        return [Unsupported("$ref", node.pointer, f"{ref!r} is not a subschema location; "
                            "point at a schema under $defs")]
    return []


def _loosen(schema: dict[str, Any], problems: list[Unsupported]) -> CheckedSchema:
    """Drop the unsupported keywords from a copy until nothing unsupported is left."""
    loosened: list[Unsupported] = []
    current = copy.deepcopy(schema)
    for _ in range(_MAX_LOOSEN_ROUNDS):
        _remove_all(current, problems)
        loosened.extend(problems)
        problems = _problems(current)
        if not problems:
            return CheckedSchema(current, canonical_json(current), tuple(loosened))
    raise UnsupportedKeywordError(problems)


def _remove_all(schema: dict[str, Any], problems: Iterable[Unsupported]) -> None:
    """Remove each problem's keyword, deepest pointer first (a removed parent simply
    takes the children along)."""
    for problem in sorted(problems, key=lambda p: len(p.pointer or ""), reverse=True):
        try:
            node = resolve_pointer(schema, problem.pointer or "")
        except KeyError:
            continue
        if isinstance(node, dict) and problem.keyword in node:
            _loosen_keyword(node, problem.keyword)


def _node_problems(node: Node, root: dict[str, Any]) -> list[Unsupported]:
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
            out.append(Unsupported(key, pointer, "unknown keyword: xgrammar does not enforce "
                                   "it; remove it or express it with supported keywords"))
        elif row.status == "unsupported":
            out.append(Unsupported(key, pointer, f"{row.note}; remove it"))
        elif names and key not in _NAME_KEYWORDS:
            out.append(Unsupported(key, pointer, "inside propertyNames only type, pattern, "
                                   "minLength, maxLength, format, enum and const are enforced"))
    if "$id" in value and pointer:
        out.append(Unsupported("$id", pointer, "a nested $id changes how $ref resolves, "
                               "which xgrammar ignores; remove it"))
    if names and value.get("type", "string") not in ("string", ["string"]):
        out.append(Unsupported("type", pointer, "property names are strings: use "
                               "\"type\": \"string\" or omit type"))
    return out


def _applicator_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """One of $ref/anyOf/oneOf/allOf, alone; allOf with one branch; oneOf disjoint."""
    present = [k for k in _APPLICATORS if k in value]
    if not present:
        return []
    first = present[0]
    where = "the referenced schema" if first == "$ref" else f"each {first} branch"
    out = [Unsupported(k, pointer, f"only one of $ref/anyOf/oneOf/allOf per subschema is "
                       f"enforced (`{first}` is); nest `{k}` inside {where}") for k in present[1:]]
    out += [Unsupported(k, pointer, f"ignored by xgrammar next to `{first}`; move it into "
                        f"{where}") for k in value if k not in _NEUTRAL and k not in _APPLICATORS]
    branches = value[first] if isinstance(value[first], list) else []
    if first == "allOf" and len(branches) > 1:
        out.append(Unsupported("allOf", pointer, "xgrammar does not intersect several allOf "
                               "branches; merge them into one schema"))
    if first == "oneOf" and not branches_disjoint(branches):
        out.append(Unsupported("oneOf", pointer, "xgrammar cannot prove the branches disjoint, "
                               "so it enforces anyOf; use branches that are only a non-object "
                               "type or const/enum, or objects with a required const/enum "
                               "discriminator property, or use anyOf"))
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
    return [Unsupported(key, pointer, f"only enforced when the subschema declares \"type\": "
                        f"\"{_NEEDS_TYPE[key]}\" (xgrammar ignores it otherwise)")
            for key in value if key in _NEEDS_TYPE
            and not any(k in value for k in _INFERRED_BY.get(_NEEDS_TYPE[key], ()))]


def _string_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """format values, one string-constraint group per subschema, pattern safety."""
    out = []
    fmt = value.get("format")
    if fmt is not None and fmt not in SGLANG_FORMATS:
        out.append(Unsupported("format", pointer, f"format {fmt!r} is not enforced; use one of "
                               f"{', '.join(sorted(SGLANG_FORMATS))}, or a pattern"))
    groups = [g for g in _STRING_GROUPS if any(k in value for k in g)]
    out += [Unsupported(k, pointer, f"xgrammar cannot enforce it together with "
                        f"`{groups[0][0]}`; keep one of format, pattern, minLength/maxLength")
            for group in groups[1:] for k in group if k in value]
    pattern = value.get("pattern")
    reason = pattern_problem(pattern) if isinstance(pattern, str) else None
    if reason:
        out.append(Unsupported("pattern", pointer, reason))
    return out


def _object_problems(value: dict[str, Any], pointer: str) -> list[Unsupported]:
    """required names, patternProperties, propertyNames, minProperties."""
    props = value.get("properties") if isinstance(value.get("properties"), dict) else {}
    out = []
    required = value.get("required") if isinstance(value.get("required"), list) else []
    missing = [n for n in required if n not in props]
    if missing:
        out.append(Unsupported("required", pointer, f"{missing} not declared in properties; "
                               "xgrammar ignores such names: declare them under properties"))
    patterns = value.get("patternProperties")
    if isinstance(patterns, dict) and patterns:
        reason = _pattern_properties_problem(patterns, props)
        if reason:
            out.append(Unsupported("patternProperties", pointer, reason))
    if "propertyNames" in value and (props or not isinstance(value["propertyNames"], dict)):
        out.append(Unsupported("propertyNames", pointer, "only enforced as a schema object and "
                               "without properties beside it (declared names bypass it)"))
    extra_keys = any(k in value for k in ("patternProperties", "propertyNames")) or any(
        value.get(k, False) is not False for k in ("additionalProperties", "unevaluatedProperties"))
    if "minProperties" in value and extra_keys:
        out.append(Unsupported("minProperties", pointer, "xgrammar may repeat undeclared keys, "
                               "so the count is not exact; set additionalProperties: false"))
    return out


def _pattern_properties_problem(patterns: dict[str, Any], props: dict[str, Any]) -> str | None:
    if len(patterns) > 1:
        return "xgrammar applies only one matching pattern per key: use a single pattern"
    pattern = next(iter(patterns))
    reason = pattern_problem(pattern)
    if reason:
        return reason
    try:
        clash = [name for name in props if re.search(pattern, name)]
    except re.error:
        return None  # the compiler reports the invalid regex
    if clash:
        return f"declared properties {clash} also match {pattern!r}; xgrammar checks them " \
               "against their property schema only"
    return None


def _value_problems(value: dict[str, Any], pointer: str, root: Any) -> list[Unsupported]:
    """enum/const values must satisfy their siblings (xgrammar emits only the values)."""
    from jsonschema import Draft202012Validator

    out = []
    for key in ("const", "enum"):
        rest = {k: v for k, v in value.items() if k != key}
        if key not in value or all(k in _NEUTRAL for k in rest):
            continue
        values = [value["const"]] if key == "const" else value[key]
        try:
            validator = Draft202012Validator(root).evolve(schema=rest)
            bad = next((v for v in values if not validator.is_valid(v)), _OK)
        except (RecursionError, LookupError, ValueError, TypeError):
            bad = "(could not check)"
        if bad is not _OK:
            out.append(Unsupported(key, pointer, f"value {json.dumps(bad)[:60]} violates the "
                                   f"sibling keywords, which xgrammar ignores next to {key}"))
    return out


_OK = object()


def _loosen_keyword(node: dict[str, Any], keyword: str) -> None:
    """Loosen ``node`` in place: oneOf becomes anyOf (what xgrammar enforces), required
    keeps its declared names, anything else is removed."""
    value = node.pop(keyword)
    if keyword == "oneOf" and "anyOf" not in node:
        node["anyOf"] = value
    elif keyword == "required" and isinstance(value, list):
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        kept = [n for n in value if n in props]
        if kept:
            node["required"] = kept

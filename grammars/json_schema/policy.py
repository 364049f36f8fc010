"""Fail-closed JSON-Schema policy for xgrammar 0.2.7 as SGLang 0.5.23 calls it.

Pure: imports neither torch, sglang, fastapi nor xgrammar. ``check_schema`` accepts a
schema only if every keyword in it is enforced exactly (or only narrowed: the grammar
may emit a subset of the valid instances, never an invalid one) by
``GrammarCompiler.compile_json_schema(schema, any_whitespace=False, strict_mode=True)``
(what SGLang does with ``constrained_json_disable_any_whitespace=True``). The evidence
is ``KEYWORDS.md`` and ``tests/grammars/test_schema_suite.py``; ``KEYWORDS`` below is
the table. Everything not in the table is an unknown keyword: an annotation, removed before
generation and listed in ``CheckedSchema.ignored`` (``annotations.py``).

Decisions:
- The root must be a JSON object; boolean root schemas are ``InvalidSchemaError``
  (use ``{}`` for "any JSON value"). Boolean subschemas are fine where xgrammar
  handles them (``false`` elsewhere fails at compile: ``GrammarCompileError``).
- ``$ref``: only ``#/...`` pointers through object members without ``~``/``%``
  escapes; recursion through ``$defs`` is supported as long as every subschema the
  grammar reaches has a finite instance (``grammars.json_schema.productive``): a loop of
  references that consumes nothing (``a -> b -> a``) or a required recursion is
  ``UnsatisfiableSchemaError``, loosening or not. ``"#"`` (root recursion: xgrammar's
  token mask then refuses valid tokens) and other ``#...`` fragments (anchors) are
  unsupported; anything else is ``RemoteRefError``.
- Always Draft 2020-12, whatever ``$schema`` says.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from grammars.errors import (
    InvalidSchemaError,
    SchemaTooComplexError,
    Unsupported,
    UnsupportedKeywordError,
)
from grammars.json_schema.access import member_dict
from grammars.json_schema.annotations import strip_unknown
from grammars.json_schema.canonical import (
    canonical_json,
    iter_subschemas,
    json_copy,
    json_depth_exceeds,
    resolve_pointer,
)
from grammars.json_schema.keywords import KEYWORDS, NOT_FOR_LLGUIDANCE, SGLANG_FORMATS, KeywordSupport
from grammars.json_schema.patterns import check_patterns
from grammars.json_schema.productive import check_productive
from grammars.json_schema.refs import check_ref
from grammars.json_schema.rewrites import rewrite_exact
from grammars.json_schema.rewrites.ids import drop_self_ids
from grammars.json_schema.rewrites.legacy import legacy_items
from grammars.json_schema.rules import node_problems

__all__ = [
    "JSON_OBJECT_SCHEMA",
    "KEYWORDS",
    "SGLANG_FORMATS",
    "CheckedSchema",
    "KeywordSupport",
    "SchemaLimits",
    "Unsupported",
    "check_schema",
    "loosen_deferred",
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
            loosened, ignored or rewritten, else a new copy.
        canonical: ``canonical_json(schema)``: what to compile, and the cache key.
        loosened: the keywords dropped (empty unless ``allow_loosening``).
        ignored: the unknown keywords removed (annotations: no effect on validity).
        rewritten: the keywords restated exactly (``rewrite.py``), as ``keyword at /pointer``.
        unenforced: the keywords xgrammar cannot enforce, kept (``defer_unsupported``): only
            llguidance's own JSON Schema compiler may serve this schema, or it is refused.
    """

    schema: dict[str, Any]
    canonical: str
    loosened: tuple[Unsupported, ...] = ()
    ignored: tuple[Unsupported, ...] = ()
    rewritten: tuple[str, ...] = ()
    unenforced: tuple[Unsupported, ...] = ()


def check_schema(
    schema: Any,
    *,
    limits: SchemaLimits = SchemaLimits(),
    allow_loosening: bool = False,
    defer_unsupported: bool = False,
) -> CheckedSchema:
    """Check ``schema`` against the limits, the 2020-12 metaschema and the keyword policy.

    Raises (in this order of checks): ``InvalidSchemaError`` for a non-object root;
    ``SchemaTooComplexError`` beyond ``limits``; ``InvalidSchemaError`` for a metaschema
    violation or a dangling local ``$ref``; ``RemoteRefError``; unless
    ``allow_loosening``, ``UnsupportedKeywordError`` listing every unsupported keyword
    occurrence (with ``allow_loosening`` those are removed from a copy instead and
    listed in ``CheckedSchema.loosened``; with ``defer_unsupported`` they stay, listed in
    ``CheckedSchema.unenforced``, for llguidance's own compiler to take or refuse);
    ``UncheckablePatternError`` for a regex RE2
    cannot run (``grammars.json_schema.patterns``); last, ``UnsatisfiableSchemaError`` when a
    subschema the grammar reaches has no finite instance. Never mutates ``schema``;
    milliseconds for schemas within the default limits.
    """
    if not isinstance(schema, dict):
        hint = "use {} for any JSON value" if schema is True else "send a JSON object"
        raise InvalidSchemaError(f"the schema must be a JSON object, got {type(schema).__name__}: {hint}", pointer="")
    text = _check_limits(schema, limits)
    schema, own_ids = drop_self_ids(schema) if '"$id": "#/' in text else (schema, ())
    schema, legacy = legacy_items(schema) if '"items": [' in text or '"additionalItems"' in text else (schema, ())
    _check_metaschema(schema)
    schema, ignored = strip_unknown(schema)
    schema, rewritten = rewrite_exact(schema)
    rewritten = own_ids + legacy + rewritten
    problems = _problems(schema)
    deferred = problems and not allow_loosening
    if deferred and (not defer_unsupported or any(p.keyword in NOT_FOR_LLGUIDANCE for p in problems)):
        raise UnsupportedKeywordError(problems)
    check_patterns(schema)  # every regex is matched again when the output is validated
    if deferred:  # llguidance's own compiler takes them or refuses them (it checks satisfiability too)
        return CheckedSchema(schema, canonical_json(schema), (), ignored, rewritten, unenforced=tuple(problems))
    checked = _loosen(schema, problems) if problems else CheckedSchema(schema, canonical_json(schema))
    check_productive(checked.schema)
    return replace(checked, ignored=ignored, rewritten=rewritten) if ignored or rewritten else checked


def loosen_deferred(checked: CheckedSchema) -> CheckedSchema:
    """What ``check_schema(schema, allow_loosening=True)`` returns for the schema that
    ``check_schema(schema, defer_unsupported=True)`` returned ``checked`` for, without running the
    policy again: its ``unenforced`` keywords loosened. Raises like that call
    (``UnsupportedKeywordError``, ``UnsatisfiableSchemaError``)."""
    if not checked.unenforced:
        return checked
    loose = _loosen(checked.schema, list(checked.unenforced))
    check_productive(loose.schema)
    return replace(loose, ignored=checked.ignored, rewritten=checked.rewritten)


def _check_limits(schema: dict[str, Any], limits: SchemaLimits) -> str:
    """Raw nesting, then subschema depth / count / enum sizes, then bytes; returns the schema as
    JSON text (``json.dumps``'s default separators)."""
    deep = json_depth_exceeds(schema, limits.max_json_depth)
    if deep is not None:
        _too_complex(f"it is nested deeper than {limits.max_json_depth} JSON levels", deep)
    count = 0
    for node in iter_subschemas(schema):
        count += 1
        if node.depth > limits.max_depth:
            _too_complex(f"subschemas are nested deeper than {limits.max_depth} levels", node.pointer)
        if count > limits.max_nodes:
            _too_complex(f"it has more than {limits.max_nodes} subschemas", node.pointer)
        enum = node.value.get("enum") if isinstance(node.value, dict) else None
        if isinstance(enum, list) and len(enum) > limits.max_enum_values:
            _too_complex(f"an enum has {len(enum)} values (limit {limits.max_enum_values})", node.pointer, "enum")
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidSchemaError(f"the schema is not JSON data: {exc}", pointer="") from None
    size = len(text.encode())
    if size > limits.max_bytes:
        _too_complex(f"it is {size} bytes (limit {limits.max_bytes})", "")
    return text


def _too_complex(what: str, pointer: str, keyword: str | None = None) -> None:
    where = pointer if len(pointer) <= 120 else pointer[:120] + "..."
    raise SchemaTooComplexError(
        f"the schema is too complex: {what} (at {where or '/'}). Simplify it: flatten "
        "nesting, split it, or move large enums into a pattern.",
        pointer=pointer,
        keyword=keyword,
    )


def _check_metaschema(schema: dict[str, Any]) -> None:
    """``InvalidSchemaError`` at the best-matching metaschema violation (pointer = the
    offending value's location, keyword = its last path element when a name). A valid schema
    is answered by jsonschema-rs (milliseconds where the Python validator's dynamic references
    take hundreds on a large schema: both agree on every MaskBench schema); an invalid one by
    the Python validator, whose best match names the error."""
    from jsonschema.exceptions import best_match

    if _fast_metaschema_is_valid(schema):
        return
    error = best_match(_metaschema_validator().iter_errors(schema))
    if error is None:
        return
    path = list(error.absolute_path)
    pointer = "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in path)
    keyword = path[-1] if path and isinstance(path[-1], str) else None
    raise InvalidSchemaError(
        f"not a valid JSON Schema (Draft 2020-12) at {pointer or '/'}: {error.message}. Fix that value.",
        pointer=pointer,
        keyword=keyword,
    )


def _fast_metaschema_is_valid(schema: dict[str, Any]) -> bool:
    """True when jsonschema-rs finds ``schema`` valid against Draft 2020-12's metaschema; False
    when it finds it invalid or cannot answer (the Python validator then decides)."""
    try:
        return bool(_fast_metaschema_validator().is_valid(schema))
    except Exception:  # noqa: BLE001 - e.g. an integer past 64 bits: the Python validator answers
        return False


@functools.cache
def _fast_metaschema_validator() -> Any:
    import jsonschema_rs
    from jsonschema import Draft202012Validator

    return jsonschema_rs.Draft202012Validator(Draft202012Validator.META_SCHEMA)


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
            problems.extend(check_ref(node, schema, locations))
            problems.extend(node_problems(node, schema))
    return problems


def _loosen(schema: dict[str, Any], problems: list[Unsupported]) -> CheckedSchema:
    """Drop the unsupported keywords from a copy until nothing unsupported is left."""
    loosened: list[Unsupported] = []
    current = json_copy(schema)
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


def _loosen_keyword(node: dict[str, Any], keyword: str) -> None:
    """Loosen ``node`` in place: oneOf becomes anyOf (what xgrammar enforces), required
    keeps its declared names, anything else is removed."""
    value = node.pop(keyword)
    if keyword == "oneOf" and "anyOf" not in node:
        node["anyOf"] = value
    elif keyword == "required" and isinstance(value, list):
        props = member_dict(node, "properties")
        kept = [n for n in value if n in props]
        if kept:
            node["required"] = kept

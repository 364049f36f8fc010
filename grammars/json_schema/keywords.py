"""The keyword table: what xgrammar 0.2.7 (as SGLang 0.5.23 calls it) enforces, per
JSON-Schema keyword, with the condition under which it is exact. Pure data; the evidence
is in grammars/KEYWORDS.md and tests/grammars/. Used by grammars/json_schema/policy.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeywordSupport:
    """One row of the keyword table.

    ``status``: ``annotation`` (no effect on validity or grammar), ``supported`` (enforced
    exactly, or narrowed: a subset of the valid values), ``conditional`` (supported when
    ``note`` holds, else reported) or ``unsupported`` (always reported)."""

    status: str
    note: str


def _rows(status: str, note: str, *keywords: str) -> dict[str, KeywordSupport]:
    return {k: KeywordSupport(status, note) for k in keywords}


_TYPED = "a type is declared (or inferred from properties/items)"
KEYWORDS: dict[str, KeywordSupport] = {
    **_rows(
        "annotation",
        "no effect on validation",
        "title",
        "description",
        "examples",
        "default",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$anchor",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    ),
    **_rows("supported", "holds subschemas for $ref", "$defs", "definitions"),
    "type": KeywordSupport("supported", "string or list; integers only as plain digits"),
    "properties": KeywordSupport("supported", "emitted in declared order (narrowing)"),
    "additionalProperties": KeywordSupport("supported", "absent = false (strict mode)"),
    "items": KeywordSupport("supported", "absent = no extra items (strict mode)"),
    "prefixItems": KeywordSupport("supported", "exact"),
    "$id": KeywordSupport("conditional", "root only (a nested $id moves $ref resolution)"),
    "$ref": KeywordSupport("conditional", "#/ member pointer, no escapes, not #, no siblings"),
    "anyOf": KeywordSupport("conditional", "no sibling assertions (xgrammar drops them)"),
    "allOf": KeywordSupport("conditional", "one branch only, no sibling assertions"),
    "oneOf": KeywordSupport("conditional", "branches provably disjoint (xgrammar's provers)"),
    **_rows("conditional", "every value satisfies the siblings (xgrammar ignores them)", "enum", "const"),
    "pattern": KeywordSupport(
        "conditional",
        f"{_TYPED}; no explicit quote/backslash/control atom, no lookaround or inner anchor; full match (narrowing)",
    ),
    **_rows("conditional", f"{_TYPED}; alone: not with pattern/format", "minLength", "maxLength"),
    "format": KeywordSupport("conditional", f"{_TYPED}; one of SGLANG_FORMATS; alone"),
    **_rows(
        "conditional",
        f"{_TYPED}; integer bounds whole, within int64",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    ),
    "required": KeywordSupport("conditional", "every name is declared in properties"),
    "patternProperties": KeywordSupport(
        "conditional", f"{_TYPED}; one safe pattern matching no declared property; full match"
    ),
    "propertyNames": KeywordSupport(
        "conditional", f"{_TYPED}; an object, no properties beside it; only string keywords/enum/const inside"
    ),
    "minProperties": KeywordSupport("conditional", f"{_TYPED}; no undeclared keys possible"),
    **_rows(
        "conditional", _TYPED, "maxProperties", "minItems", "maxItems", "unevaluatedProperties", "unevaluatedItems"
    ),
    **_rows(
        "unsupported",
        "ignored by xgrammar",
        "not",
        "if",
        "then",
        "else",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
    ),
    **_rows(
        "unsupported",
        "dynamic references are not resolved by xgrammar",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
    ),
    "multipleOf": KeywordSupport("unsupported", "refused by SGLang before xgrammar"),
    "additionalItems": KeywordSupport(
        "annotation", "drafts before 2020-12: restated with an array items, else removed (rewrites/legacy.py)"
    ),
    "nullable": KeywordSupport("unsupported", "OpenAPI, not JSON Schema: use a type list"),
}
"""Every keyword the policy knows; anything else is an unknown keyword (unsupported)."""

NOT_FOR_LLGUIDANCE = frozenset({"nullable"})
"""Assertions of another dialect (OpenAPI) that llguidance 1.x, following 2020-12, reads as
annotations without a warning: a schema xgrammar cannot take for one of them is
refused, not sent to llguidance's own compiler (which would drop the author's meaning)."""

SGLANG_FORMATS = frozenset(
    {
        "date",
        "date-time",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "json-pointer",
        "relative-json-pointer",
        "time",
        "uri",
        "uri-reference",
        "uri-template",
        "uuid",
    }
)
"""The ``format`` values xgrammar enforces (SGLang rejects any other)."""

_APPLICATORS = ("$ref", "anyOf", "oneOf", "allOf")
_NEUTRAL = frozenset(k for k, v in KEYWORDS.items() if v.status == "annotation") | {"$defs", "definitions", "$id"}
_NAME_KEYWORDS = frozenset({"type", "pattern", "minLength", "maxLength", "format", "enum", "const"}) | _NEUTRAL
_NEEDS_TYPE = {
    **dict.fromkeys(("pattern", "minLength", "maxLength", "format"), "string"),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"), "number"),
    **dict.fromkeys(
        ("patternProperties", "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties"), "object"
    ),
    **dict.fromkeys(("minItems", "maxItems", "unevaluatedItems"), "array"),
}
_INFERRED_BY = {"object": ("properties", "additionalProperties"), "array": ("items", "prefixItems")}
_STRING_GROUPS = (("format",), ("pattern",), ("minLength", "maxLength"))

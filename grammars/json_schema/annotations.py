"""Unknown keywords are annotations (JSON Schema 2020-12, section 6.5 of the core spec): a
validator ignores them, and so does generation. ``strip_unknown`` removes them from a copy of
the schema before the policy, the grammar translation and the compile see it, and names each
one (keyword and pointer) so the service can report it and count it.

A keyword is unknown when it is not in the keyword table (``keywords.KEYWORDS``); known
assertion keywords that no library enforces stay with the policy (refused, or loosened on
request). An unknown keyword that holds the target of a ``$ref`` is kept: the policy then
refuses the reference by name (``$ref`` into a non-schema location).

A ``format`` whose name JSON Schema does not define (``url``, ``byte``, ``int32``, ...) is an
annotation too: no validator asserts it (jsonschema's format checker ignores unknown names), so
it is removed and named the same way. A defined name stays with the policy (enforced, or
refused: a format-asserting validator checks ``regex``, ``iri``, ...).
"""

from __future__ import annotations

from typing import Any

from grammars.errors import Unsupported
from grammars.json_schema.canonical import escape_token, iter_subschemas, json_copy, resolve_pointer
from grammars.json_schema.keywords import KEYWORDS

__all__ = ["FORMAT_REASON", "IGNORED_REASON", "SPEC_FORMATS", "strip_unknown"]

IGNORED_REASON = "unknown keyword: an annotation under JSON Schema 2020-12, ignored for generation and validation"
FORMAT_REASON = (
    "format name not defined by JSON Schema 2020-12: an annotation no validator asserts, "
    "ignored for generation and validation"
)
SPEC_FORMATS = frozenset(
    {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
     "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
     "relative-json-pointer", "regex"}
)  # fmt: skip
"""The formats JSON Schema 2020-12 defines (Validation, section 7.3)."""


def strip_unknown(schema: dict[str, Any]) -> tuple[dict[str, Any], tuple[Unsupported, ...]]:
    """(``schema`` without its unknown keywords, the removed ones). Returns ``schema`` itself
    when there is nothing to remove; never mutates it."""
    targets = _ref_targets(schema)
    found = [
        (node.pointer, key)
        for node in iter_subschemas(schema)
        if isinstance(node.value, dict)
        for key in node.value
        if (key not in KEYWORDS or (key == "format" and not _defined_format(node.value)))
        and f"{node.pointer}/{escape_token(key)}" not in targets
    ]
    if not found:
        return schema, ()
    out = json_copy(schema)
    for pointer, key in found:
        resolve_pointer(out, pointer).pop(key, None)
    return out, tuple(
        Unsupported(key, pointer, FORMAT_REASON if key == "format" else IGNORED_REASON) for pointer, key in found
    )


def _defined_format(value: dict[str, Any]) -> bool:
    """A ``format`` the policy judges: a name JSON Schema defines (a format-asserting validator
    checks it: it stays, and is enforced or refused); any other name no validator asserts."""
    return value.get("format") in SPEC_FORMATS


def _ref_targets(schema: dict[str, Any]) -> set[str]:
    """Every prefix of every local ``$ref`` pointer (``#/a/b`` gives ``/a`` and ``/a/b``)."""
    out: set[str] = set()
    for node in iter_subschemas(schema):
        ref = node.value.get("$ref") if isinstance(node.value, dict) else None
        if isinstance(ref, str) and ref.startswith("#/"):
            parts = ref[1:].split("/")[1:]
            out.update("/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out

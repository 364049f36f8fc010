"""Unknown keywords are annotations (JSON Schema 2020-12, section 6.5 of the core spec): a
validator ignores them, and so does generation. ``strip_unknown`` removes them from a copy of
the schema before the policy, the grammar translation and the compile see it, and names each
one (keyword and pointer) so the service can report it and count it.

A keyword is unknown when it is not in the keyword table (``keywords.KEYWORDS``); known
assertion keywords that no library enforces stay with the policy (refused, or loosened on
request). An unknown keyword that holds the target of a ``$ref`` is kept: the policy then
refuses the reference by name (``$ref`` into a non-schema location).
"""

from __future__ import annotations

import copy
from typing import Any

from grammars.errors import Unsupported
from grammars.json_schema.canonical import escape_token, iter_subschemas, resolve_pointer
from grammars.json_schema.keywords import KEYWORDS

__all__ = ["IGNORED_REASON", "strip_unknown"]

IGNORED_REASON = "unknown keyword: an annotation under JSON Schema 2020-12, ignored for generation and validation"


def strip_unknown(schema: dict[str, Any]) -> tuple[dict[str, Any], tuple[Unsupported, ...]]:
    """(``schema`` without its unknown keywords, the removed ones). Returns ``schema`` itself
    when there is nothing to remove; never mutates it."""
    targets = _ref_targets(schema)
    found = [
        (node.pointer, key)
        for node in iter_subschemas(schema)
        if isinstance(node.value, dict)
        for key in node.value
        if key not in KEYWORDS and f"{node.pointer}/{escape_token(key)}" not in targets
    ]
    if not found:
        return schema, ()
    out = copy.deepcopy(schema)
    for pointer, key in found:
        resolve_pointer(out, pointer).pop(key, None)
    return out, tuple(Unsupported(key, pointer, IGNORED_REASON) for pointer, key in found)


def _ref_targets(schema: dict[str, Any]) -> set[str]:
    """Every prefix of every local ``$ref`` pointer (``#/a/b`` gives ``/a`` and ``/a/b``)."""
    out: set[str] = set()
    for node in iter_subschemas(schema):
        ref = node.value.get("$ref") if isinstance(node.value, dict) else None
        if isinstance(ref, str) and ref.startswith("#/"):
            parts = ref[1:].split("/")[1:]
            out.update("/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out

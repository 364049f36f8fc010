"""Nested ``$id`` values that only repeat their own location, removed.

Draft-07 schemas in real projects (validate-pyproject's ``setuptools`` and ``project_metadata``)
label definitions with ``"$id": "#/definitions/package-name"`` at ``/definitions/package-name``.
Draft 2020-12's metaschema refuses a fragment in ``$id``, and a nested ``$id`` is one the policy
refuses (it could move ``$ref`` resolution). This one moves nothing: a fragment-only ``$id`` keeps
the base URI (RFC 3986, 5.2.2), and the fragment is the JSON pointer any ``$ref`` already resolves
to that same node. Removing it is exact; any other nested ``$id`` stays for the policy.
"""

from __future__ import annotations

from typing import Any

from grammars.json_schema.canonical import iter_subschemas, json_copy

__all__ = ["drop_self_ids"]


def drop_self_ids(schema: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(``schema`` without the nested ``$id`` equal to ``#`` + its own pointer, ``$id at
    /pointer`` per removal); ``schema`` itself when there is none. Never mutates ``schema``."""
    found = [node.pointer for node in iter_subschemas(schema) if _self_id(node.value, node.pointer)]
    if not found:
        return schema, ()
    out = json_copy(schema)
    for node in iter_subschemas(out):
        if node.pointer in found:
            del node.value["$id"]
    return out, tuple(f"$id at {pointer}" for pointer in found)


def _self_id(value: Any, pointer: str) -> bool:
    return bool(pointer) and isinstance(value, dict) and value.get("$id") == "#" + pointer

"""The ``$ref`` rule of the policy (``policy.check_schema``): which local references xgrammar
resolves exactly; a remote reference is ``RemoteRefError``, a dangling one ``InvalidSchemaError``."""

from __future__ import annotations

from typing import Any

from grammars.errors import InvalidSchemaError, RemoteRefError, Unsupported
from grammars.json_schema.canonical import Node, resolve_pointer

__all__ = ["check_ref"]


def check_ref(node: Node, root: dict[str, Any], locations: set[str]) -> list[Unsupported]:
    ref = node.value.get("$ref")
    if not isinstance(ref, str):
        return []
    if not ref.startswith("#"):
        raise RemoteRefError(
            f"$ref {ref!r} at {node.pointer or '/'} is not local; only references into the "
            'same schema ("#/$defs/...") are allowed: inline the referenced schema '
            "under $defs",
            pointer=node.pointer,
            keyword="$ref",
        )
    if ref != "#" and not ref.startswith("#/"):
        return [
            Unsupported(
                "$ref",
                node.pointer,
                "references to $anchor names are not resolved by xgrammar; use a JSON pointer like #/$defs/name",
            )
        ]
    if ref == "#":
        return [
            Unsupported(
                "$ref",
                node.pointer,
                "recursion through the root makes xgrammar's "
                "token mask refuse valid tokens such as `}}`; move the schema to "
                '$defs/<name> and use {"$ref": "#/$defs/<name>"} everywhere',
            )
        ]
    if "~" in ref or "%" in ref:
        return [
            Unsupported(
                "$ref",
                node.pointer,
                "xgrammar does not decode ~0/~1/% escapes in $ref; rename the target to plain characters",
            )
        ]
    try:
        resolve_pointer(root, ref[1:], members_only=True)
    except KeyError:
        try:
            resolve_pointer(root, ref[1:])
        except KeyError:
            pass
        else:
            return [
                Unsupported(
                    "$ref",
                    node.pointer,
                    "xgrammar resolves $ref only through non-empty object member names; point at a schema in $defs",
                )
            ]
        raise InvalidSchemaError(
            f"$ref {ref!r} at {node.pointer or '/'} points at nothing in the schema; fix the pointer or add the target",
            pointer=node.pointer,
            keyword="$ref",
        ) from None
    if ref[1:] not in locations:
        return [
            Unsupported("$ref", node.pointer, f"{ref!r} is not a subschema location; point at a schema under $defs")
        ]
    return []

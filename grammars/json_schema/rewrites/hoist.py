"""Local ``$ref`` targets inside other subschemas, copied under ``$defs``.

A ``$ref`` may point anywhere in the schema (``#/definitions/step/properties/with``), not only at
a whole ``$defs`` entry. The rewrites move keywords (assertions into ``anyOf`` branches, ``allOf``
parts merged) and loosening drops them; either can take a referenced subschema with it and leave
the ``$ref`` dangling, so until now a subschema holding a target was never rewritten and a
loosened schema could point at nothing. ``hoist_ref_targets`` first points every such ``$ref`` at
a copy of its target under ``$defs`` (named after the original pointer, ``ref:definitions.step.
properties.with``). Exact: a copy is the same JSON, and every ``$ref`` resolves to the same value
(nested ``$id``/``$anchor`` are the policy's to refuse; a pointer with ``~``/``%`` escapes is left).
"""

from __future__ import annotations

from typing import Any

from grammars.json_schema.canonical import iter_subschemas, json_copy

__all__ = ["hoist_ref_targets"]

_CONTAINERS = ("$defs", "definitions")


def hoist_ref_targets(schema: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the schema with every hoisted ``$ref`` re-pointed, ``$ref at /pointer`` per re-pointed
    reference); ``schema`` itself when no ``$ref`` points inside another subschema. Never
    mutates ``schema``."""
    nodes = {node.pointer: node.value for node in iter_subschemas(schema)}
    refs = (v.get("$ref") for v in nodes.values() if isinstance(v, dict))
    targets = sorted({r for r in refs if isinstance(r, str) and _hoistable(r) and r[1:] in nodes})
    defs = schema.get("$defs", {})
    if not targets or not isinstance(defs, dict):
        return schema, ()
    out = json_copy(schema)
    defs = out.setdefault("$defs", {})
    names: dict[str, str] = {}
    for target in targets:
        name = _fresh(defs, "ref:" + target[2:].replace("/", "."))
        defs[name] = json_copy(nodes[target[1:]])
        names[target] = f"#/$defs/{name}"
    moved = []
    for node in iter_subschemas(out):
        ref = node.value.get("$ref") if isinstance(node.value, dict) else None
        if isinstance(ref, str) and ref in names:
            node.value["$ref"] = names[ref]
            moved.append(f"$ref at {node.pointer or '/'}")
    return out, tuple(moved)


def _hoistable(ref: str) -> bool:
    """A local target that is not the root nor a whole ``$defs``/``definitions`` entry, spelled
    without escapes."""
    parts = ref[2:].split("/") if ref.startswith("#/") else []
    whole_entry = len(parts) == 2 and parts[0] in _CONTAINERS
    return bool(parts) and not whole_entry and "~" not in ref and "%" not in ref and "" not in parts


def _fresh(defs: dict[str, Any], name: str) -> str:
    out, n = name, 1
    while out in defs:
        n += 1
        out = f"{name}.{n}"
    return out

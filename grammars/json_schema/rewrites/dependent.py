"""``dependentRequired`` (and draft 7's ``dependencies`` with name lists) over the declared
properties of a closed object, restated exactly as an ``anyOf`` (``rewrite.py`` runs it): the
objects with each trigger absent, or present with its dependents required."""

from __future__ import annotations

import itertools
from typing import Any

from grammars.json_schema.keywords import _NEUTRAL

__all__ = ["MAX_DEPENDENT", "OBJECT_KEYS", "dependent_required", "draft7_dependencies", "mergeable"]

MAX_DEPENDENT = 3
OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})


def mergeable(part: dict[str, Any]) -> bool:
    return (
        all(k in OBJECT_KEYS or k in _NEUTRAL for k in part)
        and part.get("type", "object") == "object"
        and part.get("additionalProperties", False) is False
        and isinstance(part.get("properties", {}), dict)
        and isinstance(part.get("required", []), list)
    )


def dependent_required(value: dict[str, Any]) -> bool:
    """``dependentRequired`` over a closed object's declared properties: an ``anyOf``."""
    deps, props = value.get("dependentRequired"), value.get("properties")
    if not isinstance(deps, dict) or not isinstance(props, dict) or not 0 < len(deps) <= MAX_DEPENDENT:
        return False
    base = {k: v for k, v in value.items() if k in OBJECT_KEYS}
    if any(k not in OBJECT_KEYS and k not in _NEUTRAL for k in value if k != "dependentRequired"):
        return False
    if not mergeable(base) or any(n not in props or any(d not in props for d in ds) for n, ds in deps.items()):
        return False
    branches = [b for present in itertools.product((False, True), repeat=len(deps)) if (b := _arm(base, deps, present))]
    if not branches:
        return False
    for key in OBJECT_KEYS | {"dependentRequired"}:
        value.pop(key, None)
    value["anyOf"] = branches
    return True


def draft7_dependencies(value: dict[str, Any]) -> bool:
    """Draft 7's ``dependencies`` with name lists only (2020-12's ``dependentRequired``), when
    the ``dependentRequired`` rewrite then applies."""
    deps = value.get("dependencies")
    if "dependentRequired" in value or not isinstance(deps, dict):
        return False
    if not all(isinstance(names, list) for names in deps.values()):
        return False  # a schema value is draft 7's dependentSchemas
    trial = {k: v for k, v in value.items() if k != "dependencies"} | {"dependentRequired": deps}
    if not dependent_required(trial):
        return False
    value.clear()
    value.update(trial)
    return True


def _arm(base: dict[str, Any], deps: dict[str, list[str]], present: tuple[bool, ...]) -> dict[str, Any] | None:
    required = list(base.get("required", []))
    absent = {n for n, on in zip(deps, present) if not on}
    for name, on in zip(deps, present):
        if on:
            required += [name, *deps[name]]
    required = list(dict.fromkeys(required))
    if absent & set(required):
        return None
    props = {n: s for n, s in base["properties"].items() if n not in absent}
    arm: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    return {**arm, "required": required} if required else arm

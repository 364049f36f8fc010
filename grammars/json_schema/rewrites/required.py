"""An exact rewrite (``rewrite.py`` runs it): ``required`` names that ``properties`` does not
declare are declared, with the schema JSON Schema already gives them.

A name no ``properties`` entry declares is held, when present, to the ``patternProperties``
schemas whose regex matches it, or else to ``additionalProperties`` (absent: any value). So
``{"required": ["a"]}`` means ``{"properties": {"a": <that schema>}, "required": ["a"]}``:
declared with the ``additionalProperties`` schema (``{}`` when absent or ``true``) when no
pattern matches it, with ``{}`` when one does (``combine.pattern_into_declared`` then adds each
matching pattern's schema, as for any declared name). xgrammar and strict mode read a required
name only through ``properties``; declared, it is enforced.

Left as it is: ``additionalProperties: false`` with no pattern matching (no object can hold:
the policy reports it), ``unevaluatedProperties`` beside (a declared name is no longer
"unevaluated"), or a pattern the policy cannot run.

Pure: imports neither torch, sglang, fastapi nor a grammar library.
"""

from __future__ import annotations

from typing import Any

from grammars.json_schema.canonical import json_copy

__all__ = ["declare_required"]


def declare_required(value: dict[str, Any]) -> bool:
    """Declare ``value``'s undeclared required names in place; True when any was."""
    required, props = value.get("required"), value.get("properties", {})
    if not isinstance(required, list) or not isinstance(props, dict) or "unevaluatedProperties" in value:
        return False
    missing = [n for n in dict.fromkeys(required) if isinstance(n, str) and n not in props]
    if not missing:
        return False
    extra = value.get("additionalProperties", True)
    declared: dict[str, Any] = {}
    for name in missing:
        matched = _matched(value.get("patternProperties"), name)
        if matched is None or (not matched and extra is False):
            return False
        declared[name] = {} if matched or extra is True else json_copy(extra)
    value["properties"] = {**props, **declared}
    return True


def _matched(patterns: Any, name: str) -> bool | None:
    """Whether a ``patternProperties`` regex matches ``name``; None when one cannot be run."""
    from grammars.json_schema.patterns import PatternError, search

    if not isinstance(patterns, dict):
        return False
    try:
        return any(search(p, name) for p in patterns)
    except PatternError:
        return None

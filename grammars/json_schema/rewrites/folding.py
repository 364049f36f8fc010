"""Two exact rewrites (the first reads the client's original schema; ``rewrite.py`` runs them).

- ``fold_values``: a subschema with ``enum``/``const`` (its own, or an ``allOf`` branch's)
  admits at most those values, so it is restated as the ``enum`` of the values the whole
  subschema admits, checked with the validator outputs are checked with
  (``LinearValidator``, against the original root so that ``$ref`` resolves as the client
  wrote it). Every sibling assertion (``not``, ``allOf``,
  ``if``/``then``/``else``, ``uniqueItems``, ...) is then enforced by the value list itself.
  Left as it is when no value passes (the policy refuses it) or a value cannot be checked.
- ``lengths_in_pattern``: ``minLength``/``maxLength`` beside an anchored ``pattern``
  (``^...$``, no top-level ``|``) whose every match already has a length within them (the
  regex's width: ``^[0-9a-f]{8}-...{12}$`` is 36 characters) are implied by it: removed, so
  that the one string keyword left is enforced. Each regex atom the policy lets through
  matches one character, never an escape.

Pure: imports neither torch, sglang, fastapi nor a grammar library.
"""

from __future__ import annotations

from typing import Any

from grammars.json_schema.canonical import resolve_pointer
from grammars.json_schema.keywords import _NEUTRAL

__all__ = ["fold_values", "lengths_in_pattern"]

_PLAIN = frozenset({"enum", "const"})


def fold_values(value: dict[str, Any], root: Any, pointer: str) -> bool:
    """Replace ``value`` (at ``pointer`` of the original ``root``) by its admitted values."""
    from grammars.json_schema.validation import LinearValidator

    listed = _values(value)
    if listed is None or all(k in _NEUTRAL or k in _PLAIN for k in value):
        return False
    try:
        original = resolve_pointer(root, pointer)
        validator = LinearValidator(root).evolve(schema=original)
        kept = [v for v in listed if validator.is_valid(v)]
    except (RecursionError, LookupError, ValueError, TypeError):
        return False
    if not kept or (len(kept) == len(listed) and all(k in _NEUTRAL or k in _PLAIN or k == "type" for k in value)):
        return False  # nothing admitted, or a plain typed enum: nothing to fold
    for key in [k for k in value if k not in _NEUTRAL]:
        del value[key]
    value["enum"] = kept
    return True


def _values(value: dict[str, Any]) -> list[Any] | None:
    """The values ``value`` lists itself, or one of its ``allOf`` branches lists."""
    branches = value.get("allOf")
    for part in [value, *(branches if isinstance(branches, list) else [])]:
        if isinstance(part, dict):
            listed = [part["const"]] if "const" in part else part.get("enum")
            if isinstance(listed, list):
                return listed
    return None


def lengths_in_pattern(value: dict[str, Any]) -> bool:
    """Drop ``minLength``/``maxLength`` that every full match of ``pattern`` satisfies."""
    pattern, low, high = value.get("pattern"), value.get("minLength", 0), value.get("maxLength")
    if not isinstance(pattern, str) or ("minLength" not in value and "maxLength" not in value):
        return False
    width = _width(pattern)
    if width is None or not isinstance(low, int) or not (high is None or isinstance(high, int)):
        return False
    if width[0] < low or (high is not None and width[1] > high):
        return False
    value.pop("minLength", None)
    value.pop("maxLength", None)
    return True


def _width(pattern: str) -> tuple[int, int] | None:
    """(shortest, longest) match of an anchored ``^...$`` pattern, None when unsure (a form
    ECMA and Python's parser read differently, or not anchored as a whole)."""
    import re

    if any(form in pattern for form in _UNSURE):
        return None
    try:
        parsed = _parser().parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    data = list(parsed.data)
    if len(data) < 2 or str(data[0][1]) != "AT_BEGINNING" or str(data[-1][1]) != "AT_END":
        return None
    low, high = parsed.getwidth()
    return int(low), int(high)


def _parser() -> Any:
    import importlib

    return importlib.import_module("re._parser")


_UNSURE = ("{,", "(?", "\\u", "\\c", "\\k", "\\p", "\\P")

"""Draft 2019-09 and earlier's array keywords, restated in Draft 2020-12's words.

Until 2020-12, ``"items": [A, B]`` gave the first elements' schemas and ``additionalItems`` the rest's
(draft-07 schemas in real projects use it, e.g. validate-pyproject's ``setuptools``); 2020-12 renamed
them ``prefixItems`` and ``items``, and its metaschema refuses an array ``items``. ``legacy_items``
restates each such node: ``prefixItems`` = the array, ``items`` = the ``additionalItems`` schema
(absent: any further element), and a root ``$schema`` names 2020-12 (llguidance reads a draft-07
``$schema`` as draft 7, where ``prefixItems`` means nothing). Exact: the meaning the array form has in
every draft that defines it, and the only one it can have (2020-12 gives it none). A node that also
has ``prefixItems`` is left for the metaschema to refuse. An ``additionalItems`` beside a
schema-valued or absent ``items`` asserts nothing in any draft (215 of MaskBench's schemas have one):
removed, and named like the restatements. ``first_error`` (``validation.py``) validates outputs
against the same restatement, so the validator agrees with the grammar.
"""

from __future__ import annotations

from typing import Any

from grammars.json_schema.canonical import iter_subschemas, json_copy

__all__ = ["DRAFT_2020_12", "legacy_items"]

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def legacy_items(schema: Any) -> tuple[Any, tuple[str, ...]]:
    """(``schema`` with every array-form ``items`` restated, ``items at /pointer`` per node);
    ``schema`` itself when there is none. Never mutates ``schema``."""
    if not any(_legacy(node.value) for node in iter_subschemas(schema)):
        return schema, ()
    out, notes = json_copy(schema), []
    for node in iter_subschemas(out):  # restated in place before the walk lists its children
        value = node.value
        if _array_form(value):
            value["prefixItems"] = value.pop("items")
            if "additionalItems" in value:
                value["items"] = value.pop("additionalItems")
            notes.append(f"items at {node.pointer or '/'}")
        elif _idle(value):
            del value["additionalItems"]
            notes.append(f"additionalItems at {node.pointer or '/'}")
    if any(note.startswith("items at") for note in notes) and isinstance(out, dict) and "$schema" in out:
        out["$schema"] = DRAFT_2020_12  # now in 2020-12's words: llguidance reads $schema
        notes.append("$schema at /")
    return out, tuple(notes)


def _legacy(value: Any) -> bool:
    return _array_form(value) or _idle(value)


def _array_form(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("items"), list) and "prefixItems" not in value


def _idle(value: Any) -> bool:
    """An ``additionalItems`` beside a schema-valued or absent ``items``: every draft that defines it
    ignores it there (draft-04 to 2019-09), and 2020-12 does not define it."""
    return isinstance(value, dict) and "additionalItems" in value and not isinstance(value.get("items"), list)

"""Typed reads of a JSON-schema node's members that may be absent or of the wrong type."""

from __future__ import annotations

from typing import Any


def member_dict(node: dict[str, Any], key: str) -> dict[str, Any]:
    """``node[key]`` when it is an object, else ``{}``."""
    value = node.get(key)
    return value if isinstance(value, dict) else {}


def member_list(node: dict[str, Any], key: str) -> list[Any]:
    """``node[key]`` when it is an array, else ``[]``."""
    value = node.get(key)
    return value if isinstance(value, list) else []

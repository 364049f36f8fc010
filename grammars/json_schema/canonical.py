"""Schema-structure helpers for the policy: subschema walk, JSON pointers, ``$ref``
following, canonical text, and ``pattern`` safety for xgrammar. Pure stdlib.

Contracts:
- ``iter_subschemas`` and ``json_depth_exceeds`` are iterative (no recursion), so any
  nesting depth is safe; the caller stops ``iter_subschemas`` early to bound work.
- ``canonical_json`` and ``json_copy`` recurse: call them only on values whose nesting was
  bounded first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = [
    "SCHEMA_LIST_KEYWORDS",
    "SCHEMA_MAP_KEYWORDS",
    "SCHEMA_SINGLE_KEYWORDS",
    "Node",
    "canonical_json",
    "deref",
    "escape_token",
    "iter_subschemas",
    "json_copy",
    "json_equal",
    "json_depth_exceeds",
    "pattern_problem",
    "resolve_pointer",
]

SCHEMA_SINGLE_KEYWORDS = frozenset(
    {
        "additionalProperties",
        "items",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contentSchema",
        "additionalItems",
    }
)
"""Keywords whose value is one subschema."""
SCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
"""Keywords whose value is an array of subschemas."""
SCHEMA_MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
"""Keywords whose value maps names to subschemas (``dependencies`` values may be arrays)."""

_MAX_REF_HOPS = 64
_COUNTS = frozenset(
    {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains"}
)


class Node(NamedTuple):
    """One subschema: its value (dict or bool), RFC 6901 pointer, nesting depth (root 1),
    and whether it constrains property names (inside ``propertyNames``). A tuple: the walk
    makes one per subschema, many times per schema."""

    value: Any
    pointer: str
    depth: int
    names: bool = False


def escape_token(token: str | int) -> str:
    """One RFC 6901 reference token (``~`` → ``~0``, ``/`` → ``~1``)."""
    text = str(token)
    return text.replace("~", "~0").replace("/", "~1") if "~" in text or "/" in text else text


def _children(node: Node) -> list[Node]:
    """The subschemas directly under ``node`` (schema positions only, never data), in order.
    Keyword names hold no ``~`` or ``/``: only member names are escaped."""
    value, pointer, depth, names = node
    depth += 1
    out = []
    for key, child in value.items():
        if key in SCHEMA_SINGLE_KEYWORDS:
            if isinstance(child, (dict, bool)):
                out.append(Node(child, f"{pointer}/{key}", depth, names or key == "propertyNames"))
        elif key in SCHEMA_LIST_KEYWORDS:
            if isinstance(child, list):
                out += [
                    Node(item, f"{pointer}/{key}/{i}", depth, names)
                    for i, item in enumerate(child)
                    if isinstance(item, (dict, bool))
                ]
        elif key in SCHEMA_MAP_KEYWORDS and isinstance(child, dict):
            out += [
                Node(item, f"{pointer}/{key}/{escape_token(name)}", depth, names)
                for name, item in child.items()
                if isinstance(item, (dict, bool))
            ]
    return out


def iter_subschemas(schema: Any) -> Iterator[Node]:
    """Every subschema of ``schema`` (depth-first, root first), iteratively."""
    stack = [Node(schema, "", 1)]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node.value, dict):
            stack += reversed(_children(node))


def json_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts and lists copied, everything else shared: immutable).
    About 3x faster than ``copy.deepcopy``, which keeps a memo for shared references that
    JSON data does not have."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    return value


def json_depth_exceeds(value: Any, limit: int) -> str | None:
    """Pointer of the first container nested deeper than ``limit`` levels, else None.

    Iterative; stops at the first violation, so cost is bounded by the size scanned.
    """
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, pointer, depth = stack.pop()
        if isinstance(item, dict):
            entries: Any = item.items()
        elif isinstance(item, list):
            entries = enumerate(item)
        else:
            continue
        if depth > limit:
            return pointer
        stack.extend((v, f"{pointer}/{escape_token(k)}", depth + 1) for k, v in entries if isinstance(v, (dict, list)))
    return None


def resolve_pointer(root: Any, pointer: str, *, members_only: bool = False) -> Any:
    """The value at RFC 6901 ``pointer`` (no ``#``); ``KeyError`` when absent, or with
    ``members_only`` when a step is an array index or an empty name."""
    if pointer == "":
        return root
    current = root
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if members_only and (token == "" or not isinstance(current, dict)):
            raise KeyError(pointer)
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise KeyError(pointer)
    return current


def deref(node: Any, root: Any) -> Any:
    """Follow local ``$ref`` chains (``#`` / ``#/...``) from ``node``; the input when the
    chain leaves the document, loops or is longer than 64 hops."""
    current = node
    for _ in range(_MAX_REF_HOPS):
        ref = current.get("$ref") if isinstance(current, dict) else None
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return current
        try:
            current = resolve_pointer(root, ref[1:])
        except KeyError:
            return node
    return node


def canonical_json(schema: Any) -> str:
    """Compact JSON with every object's keys sorted, except the members of
    ``properties``, whose order is kept: xgrammar emits properties in declared order,
    so that order is part of the grammar. Integral float counts (``"maxItems": 2.0``)
    become integers (same meaning; xgrammar refuses floats there). Equal schemas give
    equal text."""
    return json.dumps(_canon_schema(schema), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _canon_schema(node: Any) -> Any:
    if not isinstance(node, dict):
        return _canon_data(node)
    out: dict[str, Any] = {}
    for key in sorted(node):
        value = node[key]
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _canon_schema(sub) for name, sub in value.items()}
        elif key in SCHEMA_SINGLE_KEYWORDS:
            out[key] = _canon_schema(value)
        elif key in SCHEMA_LIST_KEYWORDS and isinstance(value, list):
            out[key] = [_canon_schema(sub) for sub in value]
        elif key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            out[key] = {name: _canon_schema(value[name]) for name in sorted(value)}
        elif key in _COUNTS and isinstance(value, float) and value.is_integer():
            out[key] = int(value)  # 2.0 == 2 for JSON Schema; xgrammar refuses 2.0
        else:
            out[key] = _canon_data(value)
    return out


def _canon_data(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _canon_data(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_canon_data(item) for item in value]
    return value


_JSON_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})
_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
_ESCAPED_CODES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "0": 0x00, "b": 0x08, "\\": 0x5C, '"': 0x22}
_HEX_LENGTHS = {"x": 2, "u": 4}


def pattern_problem(pattern: str) -> str | None:
    """Why xgrammar would not enforce ``pattern`` soundly, or None.

    xgrammar matches the regex against the JSON-escaped string text: a regex atom that
    names ``"``, ``\\`` or a control character explicitly (literally or as an escape such
    as ``\\n``, ``\\x5c``) lets invalid JSON or wrong values through, and lookarounds
    are dropped. Negated classes, ranges, ``.``, ``\\s``/``\\S``/``\\W``/``\\D`` are safe
    (measured): xgrammar keeps those away from quote, backslash and control characters.
    """
    if any(look in pattern for look in _LOOKAROUNDS):
        return "lookahead/lookbehind assertions are ignored by xgrammar; rewrite without them"
    i, negated = 0, None  # negated: None outside a class, else whether it is [^...]
    while i < len(pattern):
        char, code, width = pattern[i], None, 1
        if char == "\\" and i + 1 < len(pattern):
            code, width = _escape_code(pattern, i + 1)
        elif char == "[" and negated is None:
            negated = pattern.startswith("^", i + 1)
            width += negated
            if pattern.startswith("]", i + width):
                return "`[]` / `[^]` mean different things in ECMA and other regex dialects"
        elif char == "]" and negated is not None:
            negated = None
        elif negated is None and (char, i > 0) in (("^", True), ("$", i < len(pattern) - 1)):
            return (
                f"xgrammar ignores the anchor {char!r} inside the pattern; use anchors only "
                "at its very start and end, e.g. ^(a|b)$"
            )
        elif char == '"' or ord(char) < 0x20:
            code = ord(char)
        if not negated and code is not None and (code < 0x20 or code in (0x22, 0x5C)):
            return (
                f"it names the character {chr(code)!r} explicitly, which xgrammar matches "
                "against the JSON-escaped text (letting invalid strings through); "
                "use a class or range instead, or drop the pattern"
            )
        i += width
    return None


def _escape_code(pattern: str, at: int) -> tuple[int | None, int]:
    """Code point named by the escape whose letter is at ``pattern[at]`` (None when it
    is a class or unknown) and the escape's total width including the backslash."""
    letter = pattern[at]
    if letter == "c" and at + 1 < len(pattern):
        return ord(pattern[at + 1]) % 32, 3
    if letter in _HEX_LENGTHS:
        digits = pattern[at + 1 : at + 1 + _HEX_LENGTHS[letter]]
        try:
            return int(digits, 16), 2 + len(digits)
        except ValueError:
            return None, 2
    return _ESCAPED_CODES.get(letter), 2


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_equal(x: Any, y: Any) -> bool:
    """JSON-Schema equality: numbers by value (1 == 1.0), booleans distinct from numbers."""
    if _is_number(x) or _is_number(y):
        return _is_number(x) and _is_number(y) and x == y
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(json_equal(a, b) for a, b in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(json_equal(x[k], y[k]) for k in x)
    return type(x) is type(y) and x == y

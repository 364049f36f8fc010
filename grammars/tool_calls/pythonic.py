"""The pythonic tool-call grammar: keyword arguments as Python literals, per schema.

Pure: builds EBNF text only (imports neither torch, sglang, fastapi nor xgrammar).
``grammars.tool_calls.constraint`` puts one ``name(`` ... ``)`` tag per tool around
:func:`pythonic_arguments` (a structural-tag ``grammar`` element).

The literals admitted are exactly ones ``ast.literal_eval`` reads back as the JSON
value the schema describes (``runtime_ext.parsers.pythonic`` parses them that way):
- strings: ``'...'`` or ``"..."``; raw characters except the quote, ``\\`` and
  control characters; escapes ``\\\\ \\' \\" \\n \\r \\t`` only;
- integers ``-?(0|[1-9][0-9]*)``; numbers add ``.digits`` and an exponent of at most
  two digits, with at most 200 integer digits (so a float never overflows to inf);
- ``True``, ``False``, ``None``; lists ``[a, b]``; dicts ``{'k': v}`` (string keys);
- separators ``,`` and ``:`` each followed by at most one space; ``k=v`` with no
  spaces; keyword arguments and dict keys in the schema's ``properties`` order.

Schema subset: ``type`` (one or a list), ``enum``, ``const``, ``anyOf``;
``properties`` / ``required`` / ``additionalProperties: false`` (absent = false when
``properties`` are declared, as xgrammar's strict mode); an object without
``properties`` is any dict (not at the top: keyword arguments must be named);
``items``, ``minItems``, ``maxItems``, ``minLength``, ``maxLength``; annotations
(``description``, ``title``, ``default``, ``examples``, ...). Anything else raises
:class:`PythonicSchemaError` naming the keyword and its JSON pointer.
"""

from __future__ import annotations

import json
import keyword
from typing import Any, Mapping

from grammars.errors import GrammarError

__all__ = ["PythonicSchemaError", "check_pythonic_name", "pythonic_arguments", "pythonic_free_text"]

_ANNOTATIONS = frozenset(
    {
        "description",
        "title",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$id",
        "$defs",
        "definitions",
    }
)
_BY_TYPE = {
    "string": {"minLength", "maxLength"},
    "array": {"items", "minItems", "maxItems"},
    "object": {"properties", "required", "additionalProperties"},
}
_SCALARS = {"integer": "int", "number": "num", "boolean": '("True" | "False")', "null": '"None"'}
_COMMON = r"""sep ::= "," " "?
str ::= "\"" (dq | esc)* "\"" | "'" (sq | esc)* "'"
dq ::= [^"\\\x00-\x1f]
sq ::= [^'\\\x00-\x1f]
esc ::= "\\" ["'\\nrt]
int ::= "-"? ("0" | [1-9] [0-9]*)
num ::= "-"? ("0" | [1-9] [0-9]{0,199}) ("." [0-9]+)? ([eE] [+-]? [0-9] [0-9]?)?
any ::= str | num | "True" | "False" | "None" | "[" (any (sep any)*)? "]" | "{" (str ":" " "? any (sep str ":" " "? any)*)? "}"
"""


class PythonicSchemaError(GrammarError):
    """A tool the pythonic grammar cannot enforce: its name is not a Python identifier,
    or its ``parameters`` use something outside the supported subset (module doc).
    ``tool`` is the function name; ``field`` is ``"name"`` or ``"parameters"``."""

    code = "unsupported_pythonic_schema"

    def __init__(
        self,
        message: str,
        *,
        tool: str,
        field: str = "parameters",
        pointer: str | None = None,
        keyword: str | None = None,
    ) -> None:
        super().__init__(message, pointer=pointer, keyword=keyword)
        self.tool = tool
        self.field = field


def _quoted(text: str) -> str:
    """An EBNF string literal matching exactly ``text``."""
    return json.dumps(text, ensure_ascii=False)


def _literals(value: Any) -> list[str]:
    """Python literals of a JSON value the parser reads back as that value."""
    if isinstance(value, str):
        return list(dict.fromkeys([repr(value), json.dumps(value, ensure_ascii=False)]))
    if value is None or isinstance(value, (bool, int)):
        return [repr(value)]
    if isinstance(value, float):
        return [repr(value)] if value == value and abs(value) != float("inf") else []
    if isinstance(value, list):
        return ["[" + ", ".join(_literals(v)[0] for v in value) + "]"]
    return ["{" + ", ".join(f"{repr(k)}: {_literals(v)[0]}" for k, v in value.items()) + "}"]


class _Builder:
    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.rules: list[str] = []

    def fail(self, pointer: str, what: str, kw: str | None = None) -> PythonicSchemaError:
        return PythonicSchemaError(
            f"tool '{self.tool}': the pythonic tool-call format cannot enforce {what} "
            f"(at {pointer or '/'} of its parameters); simplify that part of the schema",
            tool=self.tool,
            pointer=pointer,
            keyword=kw,
        )

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name} ::= {body}")
        return name

    def value(self, schema: Any, pointer: str) -> str:
        """The rule name (or inline expression) for values of ``schema``."""
        if schema is True or schema == {}:
            return "any"
        if not isinstance(schema, Mapping):
            raise self.fail(pointer, "a `false` schema")
        keys = set(schema) - _ANNOTATIONS
        for choice in ("enum", "const"):
            if choice in schema:
                return self.choices(schema, choice, keys, pointer)
        if "anyOf" in schema:
            if keys != {"anyOf"}:
                raise self.fail(pointer, "anyOf next to other keywords", "anyOf")
            parts = [self.value(s, f"{pointer}/anyOf/{i}") for i, s in enumerate(schema["anyOf"])]
            return self.rule(" | ".join(parts))
        types = schema.get("type")
        types = [types] if isinstance(types, str) else types
        if not types:
            raise self.fail(pointer, f"a schema without `type` (keywords: {sorted(keys)})", "type")
        allowed = {"type"}.union(*(_BY_TYPE.get(t, set()) for t in types))
        extra = sorted(keys - allowed)
        if extra:
            raise self.fail(pointer, f"`{extra[0]}`", extra[0])
        return self.rule(" | ".join(self.typed(t, schema, pointer) for t in types))

    def choices(self, schema: Mapping[str, Any], kw: str, keys: set[str], pointer: str) -> str:
        values = schema["enum"] if kw == "enum" else [schema["const"]]
        if keys - {kw, "type"}:
            raise self.fail(pointer, f"`{kw}` next to {sorted(keys - {kw, 'type'})}", kw)
        literals = [lit for v in values for lit in _literals(v)]
        if not literals:
            raise self.fail(pointer, f"a `{kw}` without a value Python can write", kw)
        return self.rule(" | ".join(_quoted(lit) for lit in literals))

    def typed(self, kind: str, schema: Mapping[str, Any], pointer: str) -> str:
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "string":
            return self.string(schema)
        if kind == "array":
            return self.array(schema, pointer)
        if kind == "object":
            return self.dict(schema, pointer)
        raise self.fail(pointer, f"type {kind!r}", "type")

    def string(self, schema: Mapping[str, Any]) -> str:
        if "minLength" not in schema and "maxLength" not in schema:
            return "str"
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        count = f"{{{low},{'' if high is None else int(high)}}}"
        return self.rule(f'"\\"" (dq | esc){count} "\\"" | "\'" (sq | esc){count} "\'"')

    def array(self, schema: Mapping[str, Any], pointer: str) -> str:
        item = self.value(schema.get("items", True), f"{pointer}/items")
        low, high = int(schema.get("minItems", 0)), schema.get("maxItems")
        if high is not None and int(high) == 0:
            return '"[" "]"'
        more = f"{{{max(low - 1, 0)},{'' if high is None else int(high) - 1}}}"
        body = f"{item} (sep {item}){more}"
        return self.rule(f'"[" {body} "]"' if low else f'"[" ({body})? "]"')

    def dict(self, schema: Mapping[str, Any], pointer: str) -> str:
        if "properties" not in schema and schema.get("additionalProperties", True) is not False:
            if "required" in schema:
                raise self.fail(pointer, "`required` without `properties`", "required")
            return '"{" (str ":" " "? any (sep str ":" " "? any)*)? "}"'
        items = [
            (f'({" | ".join(_quoted(lit) for lit in _literals(name))}) ":" " "? {value}', req)
            for name, value, req in self.members(schema, pointer)
        ]
        return self.rule(f'"{{" {self.ordered(items)} "}}"')

    def members(self, schema: Mapping[str, Any], pointer: str) -> list[tuple[str, str, bool]]:
        """``(name, value rule, required)`` per declared property, in order."""
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        if schema.get("additionalProperties", False) is not False:
            raise self.fail(
                pointer, "`additionalProperties` other than false next to `properties`", "additionalProperties"
            )
        missing = [n for n in required if n not in props]
        if missing:
            raise self.fail(pointer, f"required property {missing[0]!r} that is not in `properties`", "required")
        return [
            (name, self.value(sub, f"{pointer}/properties/{name}"), name in required) for name, sub in props.items()
        ]

    def ordered(self, items: list[tuple[str, bool]]) -> str:
        """Items in order, optional ones skippable, joined by ``sep``; EBNF for the lot."""
        first, rest = '""', '""'
        for item, req in reversed(items):
            more = self.rule(f"sep {item} {rest}" + ("" if req else f" | {rest}"))
            first = self.rule(f"{item} {rest}" + ("" if req else f" | {first}"))
            rest = more
        return first


def check_pythonic_name(name: str) -> None:
    """A function name the parser reads as a Python call: a (dotted) identifier."""
    if not all(part.isidentifier() and not keyword.iskeyword(part) for part in name.split(".")):
        raise PythonicSchemaError(
            f"the function name '{name}' is not a Python identifier, so the pythonic tool-call "
            "format cannot write a call to it; use letters, digits and underscores",
            tool=name,
            field="name",
        )


def pythonic_arguments(tool: str, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """The structural-tag element for the keyword arguments of ``tool`` (inside ``(...)``)."""
    check_pythonic_name(tool)
    builder = _Builder(tool)
    schema = parameters if parameters is not None else {"type": "object", "properties": {}}
    if "properties" not in schema and schema.get("additionalProperties", True) is not False:
        raise builder.fail("", "an object without `properties` (keyword arguments need names)", "properties")
    extra = sorted(set(schema) - _ANNOTATIONS - _BY_TYPE["object"] - {"type"})
    if extra:
        raise builder.fail("", f"`{extra[0]}`", extra[0])
    items = []
    for name, value, req in builder.members(schema, ""):
        if not name.isidentifier() or keyword.iskeyword(name):
            raise builder.fail(
                f"/properties/{name}", f"the property name {name!r} (not a Python identifier)", "properties"
            )
        items.append((f'"{name}=" {value}', req))
    root = builder.ordered(items)
    grammar = "\n".join([f"root ::= {root}", *builder.rules, _COMMON])
    return {"type": "grammar", "grammar": grammar}


def pythonic_free_text() -> dict[str, Any]:
    """Text the parser never reads as a call list: its first non-space character is not ``[``."""
    return {
        "type": "or",
        "elements": [
            {"type": "regex", "pattern": "[ \\t\\r\\n]*"},
            {
                "type": "sequence",
                "elements": [{"type": "regex", "pattern": "[ \\t\\r\\n]*[^ \\t\\r\\n\\[]"}, {"type": "any_text"}],
            },
        ],
    }

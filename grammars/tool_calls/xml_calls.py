"""Tool-call grammars of the XML_PARAMS formats (Qwen3-Coder / Qwen3.5, GLM-4.5+). Pure.

A call is ``call_start NAME name_end`` then one ``key_start KEY key_end VALUE value_end``
per argument, in the schema's ``properties`` order (required ones always, optional ones
may be left out), then ``call_end``. ``runtime_ext.parsers.xml_params`` reads it back:

- a string parameter (``type: string``, or an enum/const of strings) is raw text that
  ends at the first closing marker of ``value_end`` (an enum: exactly one of its values);
- any other parameter is JSON per its own schema (xgrammar ``json_schema``), so an
  integer is written ``5`` and read back as ``5``.

Schemas the format cannot carry exactly raise :class:`XmlSchemaError` (a 400 naming the
tool field): parameters that are not an object with ``properties``, ``additionalProperties``
other than false, a parameter that may be a string or another type (the raw text could
not tell which), a string with keywords raw text cannot enforce (``pattern``,
``minLength``, ``format`` ...), ``$ref``, and property names the markers cannot hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from grammars.errors import GrammarError
from runtime_ext.formats import ToolFormat

__all__ = ["XmlSchemaError", "xml_arguments"]

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated"})
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"}) | _ANNOTATIONS
JsonElement = Callable[[Mapping[str, Any]], dict[str, Any]]


class XmlSchemaError(GrammarError):
    """A tool whose ``parameters`` an XML tool-call format cannot enforce exactly.
    ``tool`` is the function name; ``field`` is ``"parameters"``."""

    code = "unsupported_xml_tool_schema"

    def __init__(self, message: str, *, tool: str, pointer: str, keyword: str | None = None) -> None:
        super().__init__(message, pointer=pointer, keyword=keyword)
        self.tool = tool
        self.field = "parameters"


def _fail(fmt: ToolFormat, tool: str, pointer: str, what: str, keyword: str | None = None) -> XmlSchemaError:
    return XmlSchemaError(
        f"tool '{tool}': the {fmt.name} tool-call format cannot enforce {what} "
        f"(at {pointer or '/'} of its parameters); simplify that part of the schema",
        tool=tool,
        pointer=pointer,
        keyword=keyword,
    )


def _string_values(schema: Mapping[str, Any]) -> list[str] | None:
    """The values of an enum/const of strings (None: not one)."""
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if values and all(isinstance(v, str) for v in values):
        return list(values)
    return None


def _admits_string(schema: Mapping[str, Any]) -> bool:
    """Whether a non-string-typed schema may still hold a string (conservatively)."""
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return any(isinstance(v, str) for v in values)
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types
    return not types or "string" in types


def _value(fmt: ToolFormat, tool: str, schema: Any, pointer: str, json_element: JsonElement) -> dict[str, Any]:
    """The VALUE element of one parameter."""
    if not isinstance(schema, Mapping) or not schema:
        raise _fail(fmt, tool, pointer, "a parameter of any type (say which type it is)")
    if "$ref" in json.dumps(schema):
        raise _fail(fmt, tool, pointer, "`$ref`", "$ref")
    closing = fmt.value_end.split()[0]
    strings = _string_values(schema)
    if strings is not None:
        if any(closing in v for v in strings):
            raise _fail(fmt, tool, pointer, f"a value holding {closing}", "enum")
        choices = [{"type": "const_string", "value": v} for v in strings]
        return choices[0] if len(choices) == 1 else {"type": "or", "elements": choices}
    if schema.get("type") == "string":
        extra = sorted(set(schema) - {"type"} - _ANNOTATIONS)
        if extra:
            raise _fail(fmt, tool, pointer, f"`{extra[0]}` on a string written as raw text", extra[0])
        return {"type": "any_text"}
    if _admits_string(schema):
        raise _fail(fmt, tool, pointer, "a parameter that may be a string or another type", "type")
    return json_element(schema)


def _key(fmt: ToolFormat, tool: str, key: str) -> str:
    stops = fmt.key_end.strip()[:1]
    if not key or key != key.strip() or stops in key or "<" in key:
        raise _fail(fmt, tool, f"/properties/{key}", f"the parameter name {key!r}", "properties")
    return key


def _checked_object(fmt: ToolFormat, tool: str, parameters: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``properties`` of a top-level schema the format can carry."""
    extra = sorted(set(parameters) - _OBJECT_KEYS)
    if extra:
        raise _fail(fmt, tool, "", f"`{extra[0]}`", extra[0])
    if parameters.get("type", "object") != "object":
        raise _fail(fmt, tool, "", "parameters that are not an object", "type")
    if parameters.get("additionalProperties", False) is not False:
        raise _fail(fmt, tool, "", "`additionalProperties` (arguments must be declared)", "additionalProperties")
    properties: Mapping[str, Any] = parameters.get("properties", {})
    missing = sorted(set(parameters.get("required", ())) - set(properties))
    if missing:
        raise _fail(fmt, tool, "", f"required property {missing[0]!r} that is not in `properties`", "required")
    return properties


def _element(fmt: ToolFormat, begin: str, value: dict[str, Any]) -> dict[str, Any]:
    """One argument. Raw text ends at the first closing marker itself (the newline a
    canonical value writes before it is part of the text, which the parser drops)."""
    if value["type"] != "any_text":
        return {"type": "tag", "begin": begin, "content": value, "end": fmt.value_end}
    closing = fmt.value_end.split()[0]
    rest = fmt.value_end[fmt.value_end.index(closing) + len(closing) :]
    tag = {"type": "tag", "begin": begin, "content": value, "end": closing}
    return {"type": "sequence", "elements": [tag, {"type": "const_string", "value": rest}]} if rest else tag


def xml_arguments(
    fmt: ToolFormat, tool: str, parameters: Mapping[str, Any] | None, json_element: JsonElement
) -> list[dict[str, Any]]:
    """The argument elements of one call of ``tool`` (in order; optional ones wrapped)."""
    if parameters is None:
        return []
    properties = _checked_object(fmt, tool, parameters)
    required = set(parameters.get("required", ()))
    elements = []
    for key, schema in properties.items():
        pointer = f"/properties/{key}"
        value = _value(fmt, tool, schema, pointer, json_element)
        begin = fmt.key_start + _key(fmt, tool, key) + fmt.key_end
        element = _element(fmt, begin, value)
        elements.append(element if key in required else {"type": "optional", "content": element})
    return elements

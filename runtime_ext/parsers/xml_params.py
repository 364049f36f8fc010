"""Parser of the XML_PARAMS style (Qwen3-Coder / Qwen3.5, GLM-4.5+).

Per call ``call_start NAME name_end`` then per argument ``key_start KEY key_end VALUE
value_end`` then ``call_end`` (``formats.tool_formats``: ``qwen3_coder``, ``glm45``).
Markers are matched by their non-space parts with any whitespace around them; a VALUE
is the raw text up to the first ``value_end`` marker (after the whole JSON object or
array of a typed parameter), less one newline at each end where the canonical markers
carry one (Qwen3-Coder writes ``>\\nVALUE\\n</parameter>``).

Values are typed by the tool's schema (``tool_schemas``): a parameter whose schema is a
string (``type: string``, or an enum/const of strings), or that the schema does not
declare, or of a tool without a schema, is the raw text as a JSON string; any other
parameter is the value read as JSON (an integer parameter written ``5`` arrives as
``5``), or the raw text as a string when it is not JSON (output validation then
reports it). Arguments stream one argument at a time: ``{"k":v`` when its value
closes, ``}`` at the end of the call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from runtime_ext.parsers.core import WHITESPACE, Core, Malformed, Step, Truncated, marked_loop
from runtime_ext.parsers.jsonscan import JsonCanonicalizer, compact, scan_container, strict_loads


def is_string_schema(schema: Any) -> bool:
    """Whether a parameter's values are written raw (strings) rather than as JSON."""
    if not isinstance(schema, Mapping):
        return True
    if schema.get("type") == "string":
        return True
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    return bool(values) and all(isinstance(v, str) for v in values)


def _json_text(text: str) -> str:
    """Canonical JSON of ``text`` as the JSON formats write it (a number too large for a
    float keeps its digits); ValueError/Malformed when it is not one JSON value."""
    if text[:1] in "{[":
        canonical = JsonCanonicalizer()
        out, used = canonical.push(text)
        if not canonical.done or used != len(text):
            raise ValueError("not one JSON value")
        return out
    value = strict_loads(text)
    if isinstance(value, (dict, list)):
        raise ValueError("a container must start the value")
    return text if isinstance(value, float) and value in (math.inf, -math.inf) else compact(value)


def typed_value(raw: str, schema: Any) -> str:
    """Compact JSON of one argument value written as ``raw`` (module doc)."""
    if is_string_schema(schema):
        return compact(raw)
    try:
        return _json_text(raw.strip(WHITESPACE))
    except (ValueError, Malformed):
        return compact(raw)


def _until(core: Core, stops: str) -> Step[int]:
    """Index of the first character in ``stops`` at or after ``pos``."""
    i = core.pos
    while True:
        text = core.text
        while i < len(text) and text[i] not in stops:
            i += 1
        if i < len(text):
            return i
        if core.eof:
            raise Truncated
        yield


def _find(core: Core, token: str) -> Step[int]:
    """Index of the first ``token`` at or after ``pos``."""
    searched = core.pos
    while True:
        found = core.text.find(token, searched)
        if found >= 0:
            return found
        searched = max(core.pos, len(core.text) - len(token) + 1)
        if core.eof:
            raise Truncated
        yield


def _tokens(core: Core, marker: str) -> Step[bool]:
    """The non-space parts of ``marker``, each after optional whitespace."""
    for token in marker.split():
        yield from core.skip_ws()
        if not (yield from core.take(token)):
            return False
    return True


def _value(core: Core, json_value: bool) -> Step[str]:
    """The raw value at ``pos`` up to its ``value_end`` (consumed). A JSON object or
    array is scanned whole first (its strings may hold the closing marker)."""
    fmt = core.fmt
    closing = fmt.value_end.split()
    start = core.pos
    if json_value:
        yield from core.skip_ws()
        yield from core.need(1)
        if core.peek() in "{[":
            core.pos = yield from scan_container(core, core.pos)
    end = yield from _find(core, closing[0])
    raw = core.text[start:end]
    if fmt.key_end.endswith("\n") and raw.startswith("\n"):
        raw = raw[1:]
    if fmt.value_end.startswith("\n") and raw.endswith("\n"):
        raw = raw[:-1]
    core.pos = end + len(closing[0])
    if not (yield from _tokens(core, " ".join(closing[1:]))):
        raise Malformed
    return raw


def _argument(core: Core, schema: Mapping[str, Any] | None, first: bool) -> Step[None]:
    """At ``key_start``: one argument, streamed when its value closes."""
    fmt = core.fmt
    core.pos += len(fmt.key_start.strip())
    end = yield from _until(core, fmt.key_end.strip()[:1])
    key = core.text[core.pos : end].strip()
    core.pos = end
    if not key or not (yield from _tokens(core, fmt.key_end)):
        raise Malformed
    properties = (schema or {}).get("properties") or {}
    typed = key in properties and not is_string_schema(properties[key])
    raw = yield from _value(core, typed)
    value = typed_value(raw, properties[key]) if typed else compact(raw)
    core.add_arguments(("{" if first else ",") + compact(key) + ":" + value)


def _arguments(core: Core, name: str) -> Step[None]:
    """The arguments of an opened call, then its closing marker."""
    fmt = core.fmt
    schema = core.schemas.get(name) if core.schemas is not None else None
    closing = fmt.call_end.split()
    first = True
    while True:
        yield from core.skip_ws()
        yield from core.need(1)
        if (yield from core.match(fmt.key_start.strip())):
            yield from _argument(core, schema, first)
            first = False
        elif (yield from core.take(closing[0])):
            break
        else:
            raise Malformed
    core.add_arguments("{}" if first else "}")
    core.close_call()
    for token in closing[1:]:
        if not (yield from core.skip_ws_then(token)):
            return


def _call(core: Core) -> Step[None]:
    """At ``call_start``: one call (emitted as a call or as content)."""
    fmt = core.fmt
    core.begin(core.pos)
    if not (yield from _tokens(core, fmt.call_start)):
        core.reject(core.pos)
        return
    end = yield from _until(core, WHITESPACE + "<" + fmt.name_end.strip()[:1])
    name, core.pos = core.text[core.pos : end], end
    if not name or not (yield from _tokens(core, fmt.name_end)):
        core.reject(core.pos)
        return
    if not core.known(name):
        last = fmt.call_end.split()[-1]
        core.reject((yield from _find(core, last)) + len(last))
        return
    core.open_call(name)
    yield from _arguments(core, name)


def run_xml_params(core: Core) -> Step[None]:
    """The whole output in the XML_PARAMS style."""
    yield from marked_loop(core, core.fmt.call_start.split()[0], _call)

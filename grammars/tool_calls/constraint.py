"""Tool-call grammars: the constraint SGLang applies so tool calls always parse.

Pure: builds JSON strings only (imports neither torch, sglang, fastapi nor
xgrammar). The result goes into SGLang's per-request sampling params
(``sampling_params["structural_tag"] = constraint.value``).

What SGLang 0.5.23 accepts: ``XGrammarGrammarBackend.dispatch_structural_tag``
json-decodes the string; a legacy tag (``{"structures": …, "triggers": …}``) is
converted, anything else is handed unchanged to
``GrammarCompiler.compile_structural_tag``, so xgrammar 0.2.7's new format
``{"type": "structural_tag", "format": {...}}`` passes through. We emit that.

Semantics (every format built here):
- ``auto``: free text; once the format's call marker appears, the call (a name
  from ``tools``, arguments per that tool's schema) is forced. llama3 has no marker
  (calls are bare JSON at the start): there the output is either the calls or text
  that never contains ``{"name"`` nor ``<|python_tag|>``; pythonic likewise (the
  call list, or text whose first non-space character is not ``[``).
- ``required``: calls from the first generated token, no text before or after.
- ``named``: like ``required`` with only ``named``'s tool.
- ``parallel=False``: at most one call (exactly one for required/named). Harmony
  (gpt-oss) always carries one call: its ``<|call|>`` is a stop token that ends the
  turn, so the grammar ends at the arguments and the stop token follows.
- Kimi-K2's call counter (``functions.NAME:IDX``) is any number of at most
  ``CALL_COUNTER_DIGITS`` digits.
  ``parallel=True``: calls separated by the format's separator (a whitespace
  separator, e.g. qwen's ``"\n"``, is any whitespace run of at most
  ``CALL_WHITESPACE_LIMIT`` characters).
- After a complete call (or group) the only continuations are: another call
  (when parallel), the format's separator / group closing, or the end of the turn,
  optionally after at most ``CALL_WHITESPACE_LIMIT`` whitespace characters. A
  model that writes its natural newline after ``</tool_call>`` can still stop;
  text after the calls is never allowed, even in ``auto``. The end of the turn is
  whatever stop tokens the compiler's ``TokenizerInfo`` holds (SGLang: the model's
  EOS ids from ``config.json`` and ``generation_config.json``).

Arguments always follow the tool's ``parameters`` schema (``strict`` does not
loosen this: a call that parses but does not validate helps no one). Their
whitespace: xgrammar's structural-tag ``json_schema`` content allows free
whitespace and has no switch to forbid it (``max_whitespace_cnt`` must be >= 1),
so by default each run is bounded to one character. Pass ``json_grammar`` (e.g.
``lambda s: str(xgrammar.Grammar.from_json_schema(json.dumps(s), any_whitespace=False))``)
to get exactly SGLang's ``constrained_json_disable_any_whitespace`` JSON
(``{"a": 1, "b": 2}``: ``", "`` and ``": "``, no other whitespace).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from grammars.tool_calls.pythonic import pythonic_arguments, pythonic_free_text
from grammars.tool_calls.xml_calls import xml_arguments
from runtime_ext.formats import CallStyle, ToolFormat, call_frame, get_format, group_frame

Mode = Literal["auto", "required", "named"]
JsonGrammar = Callable[[Mapping[str, Any]], str]
"""JSON schema -> EBNF (with a ``root`` rule) accepting exactly the JSON to generate."""

EMPTY_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}
JSON_WHITESPACE_LIMIT = 1
"""Longest whitespace run inside arguments when no ``json_grammar`` is given."""
CALL_WHITESPACE_LIMIT = 2
"""Longest whitespace run between two calls and after the last one (before EOS)."""
CALL_COUNTER_DIGITS = 6
"""Longest call counter (Kimi-K2's ``functions.NAME:IDX``)."""


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call. ``parameters`` None means no arguments (``{}``).
    ``arguments_ebnf``: the arguments' own grammar instead of ``parameters`` (a custom tool's
    ``{"input": …}``, ``grammars.lark.custom_tool_json``); JSON call formats only."""

    name: str
    parameters: Mapping[str, Any] | None = None
    strict: bool = False
    arguments_ebnf: str | None = None


@dataclass(frozen=True)
class Constraint:
    """Exactly what goes into SGLang's sampling params under the key ``kind``."""

    kind: Literal["structural_tag", "ebnf", "json_schema"]
    value: str


class ToolConstraintError(ValueError):
    """The request cannot be turned into a constraint (no tools, unknown named tool, …)."""


def _arguments(tool: ToolSpec, json_grammar: JsonGrammar | None) -> dict[str, Any]:
    if tool.arguments_ebnf is not None:
        return {"type": "grammar", "grammar": tool.arguments_ebnf}
    schema = dict(tool.parameters) if tool.parameters is not None else dict(EMPTY_PARAMETERS)
    return _json(schema, json_grammar)


def _json(schema: Mapping[str, Any], json_grammar: JsonGrammar | None) -> dict[str, Any]:
    if json_grammar is not None:
        return {"type": "grammar", "grammar": json_grammar(schema)}
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": JSON_WHITESPACE_LIMIT}


def _xml_tag(fmt: ToolFormat, tool: ToolSpec, json_grammar: JsonGrammar | None) -> dict[str, Any]:
    """One XML_PARAMS call (``grammars.tool_calls.xml_calls``); no arguments: at most one whitespace."""
    if tool.arguments_ebnf is not None:
        raise ToolConstraintError(f"tool {tool.name!r}: a grammar for the arguments needs a JSON call format")
    arguments = xml_arguments(fmt, tool.name, tool.parameters, lambda s: _json(s, json_grammar))
    content = _seq(*arguments) if arguments else _ws(1)
    return {"type": "tag", "begin": fmt.call_start + tool.name + fmt.name_end, "content": content, "end": fmt.call_end}


def _tags(fmt: ToolFormat, tools: Sequence[ToolSpec], json_grammar: JsonGrammar | None) -> list[dict[str, Any]]:
    if fmt.style is CallStyle.XML_PARAMS:
        return [_xml_tag(fmt, tool, json_grammar) for tool in tools]
    tags = []
    for tool in tools:
        if fmt.style is CallStyle.PYTHONIC:
            if tool.arguments_ebnf is not None:
                raise ToolConstraintError(f"tool {tool.name!r}: a grammar for the arguments needs a JSON call format")
            before, after, content = f"{tool.name}(", ")", pythonic_arguments(tool.name, tool.parameters)
        else:
            (before, after), content = call_frame(fmt, tool.name), _arguments(tool, json_grammar)
            before, content, after = _counted(fmt, tool.name, before, content, after)
        tags.append({"type": "tag", "begin": before, "content": content, "end": after})
    return tags


def _counted(
    fmt: ToolFormat, name: str, before: str, content: dict[str, Any], after: str
) -> tuple[str, dict[str, Any], str]:
    """A JSON call's pieces as forced: Kimi-K2's call counter is any number (``index_sep``);
    a Harmony call ends at its arguments, its ``<|call|>`` being the turn's stop token."""
    if fmt.index_sep:
        counter = {"type": "regex", "pattern": f"[0-9]{{1,{CALL_COUNTER_DIGITS}}}"}
        name_end = {"type": "const_string", "value": fmt.name_end}
        return fmt.call_start + name + fmt.index_sep, _seq(counter, name_end, content), after
    if fmt.style is CallStyle.HARMONY:
        return before, content, ""
    return before, content, after


def _ws(limit: int = CALL_WHITESPACE_LIMIT) -> dict[str, Any]:
    return {"type": "regex", "pattern": f"[ \\t\\r\\n]{{0,{limit}}}"}


def _one_of(elements: list[dict[str, Any]]) -> dict[str, Any]:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def _separator(fmt: ToolFormat) -> dict[str, Any]:
    """Between two calls: the format's separator, or bounded whitespace when it is whitespace."""
    if fmt.separator.strip():
        return {"type": "const_string", "value": fmt.separator}
    return _ws()


def _seq(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "sequence", "elements": list(elements)}


def _repeated(first: dict[str, Any], more: dict[str, Any], parallel: bool) -> dict[str, Any]:
    """``first`` then, when ``parallel``, ``more`` any number of times."""
    return _seq(first, {"type": "star", "content": more}) if parallel else first


def _calls(fmt: ToolFormat, tags: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """One or more calls (exactly one unless ``parallel``) with their group markers."""
    call = _one_of(tags)
    if fmt.style is CallStyle.HARMONY:
        return call  # one call per turn: its <|call|> ends the turn
    calls = _repeated(call, _seq(_separator(fmt), call), parallel)
    if fmt.style in (CallStyle.JSON_ARRAY, CallStyle.NAMED_BLOCKS, CallStyle.PYTHONIC):
        opening, closing = group_frame(fmt)
        return {"type": "tag", "begin": opening, "content": calls, "end": closing}
    return calls


def _tagged_auto(fmt: ToolFormat, tags: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """TAGGED auto: free text; the call marker starts the calls, which end the output.

    The first call is one tag opened by the trigger (its marker) and closed by the
    call's end marker; further calls sit inside it, each after the separator.
    """
    start, end = fmt.call_start, fmt.call_end
    bodies = [dict(t, begin=t["begin"][len(start) :], end=t["end"][: -len(end)]) for t in tags]
    closed = [dict(t, end=t["end"][: -len(end)]) for t in tags]
    more = _seq({"type": "const_string", "value": end}, _separator(fmt), _one_of(closed))
    group = {"type": "tag", "begin": start, "content": _repeated(_one_of(bodies), more, parallel), "end": end}
    return {"type": "triggered_tags", "triggers": [start], "tags": [group], "stop_after_first": True}


def _xml_auto(fmt: ToolFormat, tags: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """XML_PARAMS auto: like TAGGED auto; the group's end closes the last call."""
    start, end = fmt.call_start, fmt.call_end
    bodies = [_seq({"type": "const_string", "value": t["begin"][len(start) :]}, t["content"]) for t in tags]
    closed = [_seq({"type": "const_string", "value": t["begin"]}, t["content"]) for t in tags]
    more = _seq({"type": "const_string", "value": end}, _separator(fmt), _one_of(closed))
    group = {"type": "tag", "begin": start, "content": _repeated(_one_of(bodies), more, parallel), "end": end}
    return {"type": "triggered_tags", "triggers": [start], "tags": [group], "stop_after_first": True}


def _free_text(fmt: ToolFormat) -> dict[str, Any]:
    """Text that the parser never reads as a call (formats whose calls have no marker)."""
    if fmt.style is CallStyle.PYTHONIC:
        return pythonic_free_text()
    return {"type": "any_text", "excludes": ['{"' + fmt.name_key + '"', fmt.call_start]}


def _format(
    fmt: ToolFormat, tags: list[dict[str, Any]], mode: Mode, parallel: bool, answer: dict[str, Any] | None
) -> dict[str, Any]:
    """The whole output; after the last call only bounded whitespace, then EOS."""
    calls = _calls(fmt, tags, parallel)
    if mode != "auto":
        body = calls
    elif answer is not None:
        body = {"type": "or", "elements": [calls, answer]}
    elif fmt.style in (CallStyle.JSON_ARRAY, CallStyle.NAMED_BLOCKS):
        body = {"type": "triggered_tags", "triggers": [fmt.opener], "tags": [calls], "stop_after_first": True}
    elif fmt.style is CallStyle.HARMONY:
        body = {"type": "triggered_tags", "triggers": [fmt.call_start], "tags": tags, "stop_after_first": True}
    elif fmt.style is CallStyle.TAGGED:
        body = _tagged_auto(fmt, tags, parallel)
    elif fmt.style is CallStyle.XML_PARAMS:
        body = _xml_auto(fmt, tags, parallel)
    else:
        return {"type": "or", "elements": [_seq(calls, _ws()), _free_text(fmt)]}
    return _seq(body, _ws())


def _selected(tools: Sequence[ToolSpec], mode: Mode, named: str | None) -> list[ToolSpec]:
    if mode not in ("auto", "required", "named"):
        raise ToolConstraintError(f"unknown tool-call mode {mode!r}")
    if not tools:
        raise ToolConstraintError("a tool-call constraint needs at least one tool")
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ToolConstraintError(f"duplicate tool names: {sorted(n for n in set(names) if names.count(n) > 1)}")
    if (mode == "named") != (named is not None):
        raise ToolConstraintError("`named` is required with mode='named' and only then")
    if mode != "named":
        return list(tools)
    if named not in names:
        raise ToolConstraintError(f"named tool {named!r} is not among the tools {names}")
    return [tool for tool in tools if tool.name == named]


def tool_call_constraint(
    fmt: ToolFormat | str,
    tools: Sequence[ToolSpec],
    mode: Mode,
    named: str | None = None,
    parallel: bool = True,
    *,
    json_grammar: JsonGrammar | None = None,
    answer_schema: Mapping[str, Any] | None = None,
) -> Constraint:
    """The structural-tag constraint for tool calls in ``fmt`` (semantics: module doc).

    ``answer_schema`` (auto mode only): the output is either the calls or one JSON
    value matching this schema (tools together with ``response_format``), never
    free text.

    Raises :class:`ToolConstraintError` for bad input and, for pythonic,
    :class:`grammars.tool_calls.pythonic.PythonicSchemaError` for a tool name or schema outside
    what Python keyword arguments can carry (``pointer`` locates it); for the XML
    formats, :class:`grammars.tool_calls.xml_calls.XmlSchemaError` likewise.
    Deterministic: equal inputs give equal strings (SGLang caches by the string).
    """
    fmt = get_format(fmt)
    selected = _selected(tools, mode, named)
    answer = None if answer_schema is None else _json(answer_schema, json_grammar)
    structure = _format(fmt, _tags(fmt, selected, json_grammar), mode, parallel, answer)
    value = json.dumps({"type": "structural_tag", "format": structure}, ensure_ascii=False, separators=(",", ":"))
    return Constraint("structural_tag", value)

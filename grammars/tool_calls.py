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
  that never contains ``{"name"`` nor ``<|python_tag|>``.
- ``required``: calls from the first generated token, no text before or after.
- ``named``: like ``required`` with only ``named``'s tool.
- ``parallel=False``: at most one call (exactly one for required/named), after
  which only EOS is allowed. ``parallel=True``: calls separated by the format's
  separator, then EOS.

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

from runtime_ext.formats import CallStyle, ToolFormat, call_frame, get_format, group_frame

Mode = Literal["auto", "required", "named"]
JsonGrammar = Callable[[Mapping[str, Any]], str]
"""JSON schema -> EBNF (with a ``root`` rule) accepting exactly the JSON to generate."""

EMPTY_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}
JSON_WHITESPACE_LIMIT = 1
"""Longest whitespace run inside arguments when no ``json_grammar`` is given."""
_SUPPORTED = (CallStyle.TAGGED, CallStyle.JSON_SEQUENCE, CallStyle.JSON_ARRAY, CallStyle.NAMED_BLOCKS)


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call. ``parameters`` None means no arguments (``{}``)."""

    name: str
    parameters: Mapping[str, Any] | None = None
    strict: bool = False


@dataclass(frozen=True)
class Constraint:
    """Exactly what goes into SGLang's sampling params under the key ``kind``."""

    kind: Literal["structural_tag", "ebnf", "json_schema"]
    value: str


class ToolConstraintError(ValueError):
    """The request cannot be turned into a constraint (no tools, unknown named tool, …)."""


class UnsupportedToolFormatError(NotImplementedError):
    """No grammar for this format (pythonic: its arguments are Python literals, not JSON)."""

    def __init__(self, format_name: str, mode: str) -> None:
        super().__init__(f"no tool-call grammar for format {format_name!r} (mode {mode!r})")
        self.format_name = format_name
        self.mode = mode


def _arguments(tool: ToolSpec, json_grammar: JsonGrammar | None) -> dict[str, Any]:
    schema = dict(tool.parameters) if tool.parameters is not None else dict(EMPTY_PARAMETERS)
    return _json(schema, json_grammar)


def _json(schema: Mapping[str, Any], json_grammar: JsonGrammar | None) -> dict[str, Any]:
    if json_grammar is not None:
        return {"type": "grammar", "grammar": json_grammar(schema)}
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": JSON_WHITESPACE_LIMIT}


def _tags(fmt: ToolFormat, tools: Sequence[ToolSpec], json_grammar: JsonGrammar | None) -> list[dict[str, Any]]:
    tags = []
    for tool in tools:
        before, after = call_frame(fmt, tool.name)
        tags.append({"type": "tag", "begin": before, "content": _arguments(tool, json_grammar), "end": after})
    return tags


def _calls(fmt: ToolFormat, tags: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """One or more calls (exactly one unless ``parallel``), separated canonically, nothing else."""
    return {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": fmt.separator,
        "at_least_one": True,
        "stop_after_first": not parallel,
    }


def _grouped(fmt: ToolFormat, calls: dict[str, Any]) -> dict[str, Any]:
    """Wrap the calls in the format's group markers (mistral array, deepseek section)."""
    opening, closing = group_frame(fmt)
    return {"type": "tag", "begin": opening, "content": calls, "end": closing}


def _format(
    fmt: ToolFormat, tags: list[dict[str, Any]], mode: Mode, parallel: bool, answer: dict[str, Any] | None
) -> dict[str, Any]:
    calls = _calls(fmt, tags, parallel)
    if fmt.style in (CallStyle.JSON_ARRAY, CallStyle.NAMED_BLOCKS):
        calls = _grouped(fmt, calls)
    if mode != "auto":
        return calls
    if answer is not None:
        return {"type": "or", "elements": [calls, answer]}
    if fmt.style in (CallStyle.JSON_ARRAY, CallStyle.NAMED_BLOCKS):
        return {"type": "triggered_tags", "triggers": [fmt.opener], "tags": [calls], "stop_after_first": True}
    if fmt.style is CallStyle.TAGGED:
        return {"type": "triggered_tags", "triggers": [fmt.call_start], "tags": tags, "stop_after_first": not parallel}
    free_text = {"type": "any_text", "excludes": ['{"' + fmt.name_key + '"', fmt.call_start]}
    return {"type": "or", "elements": [calls, free_text]}


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

    Raises :class:`ToolConstraintError` for bad input and
    :class:`UnsupportedToolFormatError` for formats without a grammar (pythonic).
    Deterministic: equal inputs give equal strings (SGLang caches by the string).
    """
    fmt = get_format(fmt)
    if fmt.style not in _SUPPORTED:
        raise UnsupportedToolFormatError(fmt.name, mode)
    selected = _selected(tools, mode, named)
    answer = None if answer_schema is None else _json(answer_schema, json_grammar)
    structure = _format(fmt, _tags(fmt, selected, json_grammar), mode, parallel, answer)
    value = json.dumps({"type": "structural_tag", "format": structure}, ensure_ascii=False, separators=(",", ":"))
    return Constraint("structural_tag", value)

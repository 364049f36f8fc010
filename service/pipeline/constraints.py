"""Constraints stage: what the client asked for -> the grammar the engine enforces.

The schema policy (grammars/) is fail-closed: a keyword the grammar cannot enforce
exactly is a 400 unless the caller (or the server config) opted into loosening.
Tool ``parameters`` go through the same policy as ``response_format`` schemas.

Tools with ``response_format``: ``required``/named force calls (the format applies to
text answers, and there is none this turn); ``auto`` allows either the calls or one
JSON value of the format, never free text; ``none`` is the format alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from grammars.errors import GrammarError
from grammars.json_schema import JSON_OBJECT_SCHEMA, CheckedSchema, check_schema, loosen_deferred
from grammars.lark import choice_to_ebnf, custom_arguments_ebnf, is_probably_lark, lark_to_ebnf
from grammars.tool_calls import PythonicSchemaError, ToolSpec, XmlSchemaError, tool_call_constraint
from service.errors import InvalidRequestError
from service.types.plan import DecodeConstraint
from service.types.request import PatternOutputSpec, ToolDef, ToolRequest, ValidatedRequest


def build_constraint(req: ValidatedRequest, default_loosening: bool, resample: bool = False) -> DecodeConstraint | None:
    """None when the output is free text; raises GrammarError (param set) otherwise.
    ``resample``: a schema no library enforces whole is served validated and resampled
    (``grammar.unenforceable``; non-streamed requests only)."""
    if req.tools is not None and (custom := req.tools.forced_custom) is not None:
        # the whole answer is the custom tool's input: its grammar, or free text
        return None if custom.grammar is None else pattern_constraint(custom.grammar)
    loosen = default_loosening if req.allow_schema_loosening is None else req.allow_schema_loosening
    pattern, tools = req.pattern_output, req.tools
    if tools is None or tools.mode == "none":  # the schema (if any) is the whole grammar
        answer = _answer(req, loosen, defer=pattern is None)
        if pattern is not None:
            return pattern_constraint(pattern)
        if answer is None:
            return None
        constraint = _json_constraint(*answer)
        return _with_fallback(constraint, answer, resample, req.stream) if constraint.unenforced else constraint
    answer = _answer(req, loosen)
    if pattern is not None and tools.mode == "auto":
        raise InvalidRequestError(
            f"'{pattern.param}' cannot be combined with tool_choice 'auto' (the answer would be a call or "
            "the pattern); use tool_choice 'none' for the pattern, or 'required' for calls",
            param=pattern.param,
        )
    return _tool_constraint(tools, loosen, answer)


def pattern_constraint(spec: PatternOutputSpec) -> DecodeConstraint:
    """A regex goes to the engine as is; a choice and a Lark grammar become xgrammar EBNF.
    (A grammar with ``::=`` is xgrammar EBNF already, as vLLM decides; a custom tool's Lark
    definition is always Lark.)"""
    if spec.kind == "regex":
        return DecodeConstraint("regex", spec.text, param=spec.param)
    try:
        if spec.kind == "choice":
            text = choice_to_ebnf(spec.choices)
        else:
            lark = spec.kind == "lark" or is_probably_lark(spec.text)
            text = lark_to_ebnf(spec.text) if lark else spec.text
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    return DecodeConstraint("ebnf", text, param=spec.param)


def _answer(req: ValidatedRequest, loosen: bool, defer: bool = False) -> tuple[CheckedSchema, Any, str] | None:
    """(checked schema, the client's schema, param) of the JSON answer, if one was asked for.
    ``defer``: keywords xgrammar cannot enforce are left for llguidance's own compiler to take
    or refuse (the grammar check), as only a schema that is the whole grammar can be."""
    spec = req.json_output
    if spec is None:
        return None
    if spec.schema is None:
        return check_schema(JSON_OBJECT_SCHEMA), JSON_OBJECT_SCHEMA, spec.param
    return _checked(spec.schema, loosen, spec.param, defer), spec.schema, spec.param


def _checked(schema: Any, loosen: bool, param: str, defer: bool = False) -> CheckedSchema:
    try:
        return check_schema(schema, allow_loosening=loosen, defer_unsupported=defer)
    except GrammarError as exc:
        raise exc.with_param(param) from None


def _loosened(checked: CheckedSchema, prefix: str = "") -> tuple[str, ...]:
    return tuple(f"{prefix}{u.keyword} at {u.pointer or '/'}" for u in checked.loosened)


def _ignored(checked: CheckedSchema, prefix: str = "") -> tuple[str, ...]:
    return tuple(f"{prefix}{u.keyword} at {u.pointer or '/'}" for u in checked.ignored)


def _json_constraint(checked: CheckedSchema, schema: Any, param: str) -> DecodeConstraint:
    return DecodeConstraint(
        "json_schema",
        checked.canonical,
        validate_schema=schema,
        loosened=_loosened(checked),
        ignored=_ignored(checked),
        param=param,
        unenforced=checked.unenforced,
    )


STREAM_HINT = (
    '; or send "stream": false: the server then validates each output and generates it again until one '
    "satisfies the schema"
)


def _with_fallback(
    constraint: DecodeConstraint, answer: tuple[CheckedSchema, Any, str], resample: bool, stream: bool
) -> DecodeConstraint:
    """``constraint`` (keywords only llguidance's own compiler may take) with what to serve if it
    refuses them: the grammar without them, outputs validated and resampled, or a hint for the 400."""
    if stream or not resample:
        return replace(constraint, hint=STREAM_HINT if stream and resample else "")
    checked, schema, _ = answer
    try:
        loose = loosen_deferred(checked)
    except GrammarError:
        return constraint
    fallback = replace(_json_constraint(loose, schema, constraint.param or ""), must_validate=True)
    return replace(constraint, fallback=fallback)


def _spec(tool: ToolDef, checked: CheckedSchema | None) -> ToolSpec:
    """A function's schema; a custom tool's ``{"input": …}`` with its grammar inside the string."""
    if tool.kind != "custom":
        return ToolSpec(tool.name, None if checked is None else checked.schema, tool.strict)
    g = tool.grammar
    try:
        ebnf = custom_arguments_ebnf(
            None if g is None else ("regex" if g.kind == "regex" else "lark"), g.text if g else ""
        )
    except GrammarError as exc:
        raise exc.with_param(g.param if g else "tools") from None
    return ToolSpec(tool.name, arguments_ebnf=ebnf)


def _tool_constraint(
    tools: ToolRequest, loosen: bool, answer: tuple[CheckedSchema, Any, str] | None
) -> DecodeConstraint:
    specs, loosened = [], list(_loosened(answer[0]) if answer else ())
    ignored = list(_ignored(answer[0]) if answer else ())
    parts = [(answer[2], answer[0].canonical)] if answer else []
    for i, tool in enumerate(tools.tools):
        if tool.parameters is None or tool.kind == "custom":
            checked = None
        else:
            param = f"tools.{i}.function.parameters"
            checked = _checked(tool.parameters, loosen, param)
            loosened += _loosened(checked, f"{tool.name}: ")
            ignored += _ignored(checked, f"{tool.name}: ")
            parts.append((param, checked.canonical))
        if tool.name in tools.allowed:
            specs.append(_spec(tool, checked))
    mode = tools.mode
    if mode == "none":  # build_constraint answers tool_choice none without a tool grammar
        raise ValueError("tool_choice 'none' has no tool-call constraint")
    try:
        constraint = tool_call_constraint(
            tools.format,
            specs,
            mode,
            named=tools.allowed[0] if mode == "named" else None,
            parallel=tools.parallel,
            answer_schema=answer[0].schema if answer else None,
        )
    except (PythonicSchemaError, XmlSchemaError) as exc:  # the field of the tool it names
        index = [tool.name for tool in tools.tools].index(exc.tool)
        raise exc.with_param(f"tools.{index}.function.{exc.field}") from None
    return DecodeConstraint(
        constraint.kind,
        constraint.value,
        validate_schema=answer[1] if answer else None,
        loosened=tuple(loosened),
        ignored=tuple(ignored),
        param="tools",
        parts=tuple(parts),
    )

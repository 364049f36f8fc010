"""The grammar check tells a busy machine (503 + Retry-After) from a bad schema (400), and routes a
``response_format`` schema to llguidance's own compiler first."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from grammars.compile import CompileStats, LarkRouter
from grammars.compile.llguidance_lark import json_schema_to_lark, native_json_schema_to_lark
from grammars.errors import CompilerBusyError, SchemaTooComplexError
from grammars.json_schema import check_schema
from runtime_ext.grammar_route import split_fallback
from service.api.errors import error_response
from service.errors import CompilerBusyServiceError
from service.grammar_check import GrammarService
from service.types.plan import DecodeConstraint

CONSTRAINT = DecodeConstraint(kind="json_schema", value="{}", param="response_format.json_schema.schema")


def _gate(error: Exception) -> GrammarService:
    """A GrammarService whose compiler raises ``error`` (no worker: the mapping is under test)."""

    def compile_(text: str) -> object:
        raise error

    gate = GrammarService.__new__(GrammarService)
    gate._compile = {"json_schema": compile_}
    gate._compiler = None
    gate._router = None
    gate._exact = False
    return gate


def test_a_busy_compiler_is_a_503_with_retry_after():
    gate = _gate(CompilerBusyError("the grammar compiler got 0.1 CPU-s in 60 s: the server is overloaded"))
    with pytest.raises(CompilerBusyServiceError) as err:
        asyncio.run(gate.ensure_compiles(CONSTRAINT))
    resp = error_response(err.value)
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "5"
    body = json.loads(resp.body)["error"]
    assert body["code"] == "server_overloaded" and body["param"] == CONSTRAINT.param
    assert body["type"] == "service_unavailable" and "overloaded" in body["message"]


def test_a_schema_over_its_budget_stays_a_400():
    gate = _gate(SchemaTooComplexError("compiling this json_schema took longer than 10 s"))
    with pytest.raises(SchemaTooComplexError) as err:
        asyncio.run(gate.ensure_compiles(CONSTRAINT))
    resp = error_response(err.value)
    assert resp.status_code == 400 and json.loads(resp.body)["error"]["param"] == CONSTRAINT.param


def _routing_gate(compiled: list[str], exact: bool = True) -> GrammarService:
    """A GrammarService with the real llguidance router (no tokenizer) and an xgrammar stand-in
    that records what reaches it (``exact``: ``grammar.json_schema_semantics: exact``)."""

    def compile_(text: str) -> CompileStats:
        compiled.append(text)
        return CompileStats(seconds=0.0, cache_hit=False)

    gate = GrammarService.__new__(GrammarService)
    gate._compile = {"json_schema": compile_}
    gate._compiler = None
    gate._router = LarkRouter(Path("/nonexistent/tokenizer.json"))
    gate._exact = exact
    return gate


def _response_format(schema: dict) -> DecodeConstraint:
    return DecodeConstraint("json_schema", check_schema(schema).canonical, param="response_format")


OPEN = {"type": "object", "properties": {"a": {"type": "integer"}}}


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "strict"])
def test_exact_semantics_go_to_llguidances_own_compiler_first(exact):
    """``exact`` (the default): JSON Schema's semantics (undeclared members allowed); ``strict``:
    strict mode written out (no undeclared member). Either carries xgrammar's strict form for a
    scheduler that cannot build llguidance; nothing is compiled by xgrammar here."""
    compiled: list[str] = []
    constraint = _response_format(OPEN)
    served = asyncio.run(_routing_gate(compiled, exact).ensure_compiles(constraint))
    lark, fallback = split_fallback(served.value)
    assert served.kind == "ebnf" and fallback == ("json_schema", constraint.value) and compiled == []
    build = native_json_schema_to_lark if exact else json_schema_to_lark
    assert lark == build(json.loads(constraint.value))
    assert ('"additionalProperties":false' in lark) is not exact


def test_a_schema_llguidance_refuses_takes_the_strict_routes():
    compiled: list[str] = []
    constraint = _response_format({"type": "string", "format": "uri-reference"})  # unknown to llguidance
    served = asyncio.run(_routing_gate(compiled).ensure_compiles(constraint))
    assert served == constraint and compiled == [constraint.value]

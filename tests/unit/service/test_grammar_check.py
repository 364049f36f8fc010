"""The grammar check tells a busy machine (503 + Retry-After) from a bad schema (400)."""

from __future__ import annotations

import asyncio
import json

import pytest

from grammars.errors import CompilerBusyError, SchemaTooComplexError
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

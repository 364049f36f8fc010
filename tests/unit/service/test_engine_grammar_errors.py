"""An engine-side grammar failure reaches the client as a typed error without SGLang's text.

The finish reasons below are the ones SGLang 0.5.23 returned through ``structserve serve``
on qwen3-tiny with both pre-checks disabled (a ``$ref`` loop: the grammar allowed no
first token; an optional ``false`` property: xgrammar refused to compile). The same text
arrives on the non-streamed path as ``ValueError`` (status 400) or
``fastapi.HTTPException`` (other statuses). Before this mapping it went out verbatim: a
500 quoting ``Key string: {...the whole schema...}``.
"""

from __future__ import annotations

import pytest

from runtime_ext.grammar_route import ENGINE_FAULT
from service.engine import _abort_error, _finish_reason
from service.errors import EngineError, InvalidRequestError
from service.types.plan import DecodeConstraint, GenerationPlan, SamplingOptions

SCHEMA = '{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}'
ACCEPT_FAILED = {
    "type": "abort",
    "status_code": 500,
    "err_type": "InternalServerError",
    "message": f"Grammar accept_token failed: Tokens not accepted: 0\nAccepted tokens: []\nKey string: {SCHEMA}",
}
COMPILE_FAILED = {
    "type": "abort",
    "status_code": 400,
    "err_type": "BadRequestError",
    "message": "Failed to compile json grammar: [03:39:58] /project/cpp/"
    "json_schema_converter.cc:4175: Schema 'false' cannot accept any value\n",
}
TIMED_OUT = {
    "type": "abort",
    "status_code": 400,
    "err_type": "BadRequestError",
    "message": "Grammar preprocessing timed out: req.grammar_key=('json', '{}')",
}
PARAM = "response_format.json_schema.schema"
PLAN = GenerationPlan((1, 2), 16, SamplingOptions(), DecodeConstraint("json_schema", SCHEMA, param=PARAM))
INTERNALS = (
    "Key string",
    "accept_token",
    "Tokens not accepted",
    "json_schema_converter",
    "$defs",
    "Failed to compile",
    "grammar_key",
    "xgrammar",
)


def _clean(message: str) -> bool:
    return not any(marker in message for marker in INTERNALS)


def test_a_grammar_that_failed_while_decoding_is_a_generic_500() -> None:
    with pytest.raises(EngineError) as info:  # the streamed path
        _finish_reason({"finish_reason": ACCEPT_FAILED}, PLAN)
    err = info.value
    assert (err.status, err.code, err.param) == (500, "grammar_engine_error", None)
    assert _clean(err.message), err.message
    again = _abort_error(ACCEPT_FAILED["message"], 500, PLAN)  # non-streamed: HTTPException(500)
    assert (type(again), again.code, again.message) == (EngineError, err.code, err.message)


@pytest.mark.parametrize("reason", [COMPILE_FAILED, TIMED_OUT], ids=["compile", "timeout"])
def test_a_grammar_the_engine_could_not_compile_is_a_400_naming_the_field(reason: dict) -> None:
    with pytest.raises(InvalidRequestError) as info:  # the streamed path
        _finish_reason({"finish_reason": reason}, PLAN)
    err = info.value
    assert (err.status, err.code, err.param) == (400, "grammar_compile_failed", PARAM)
    assert _clean(err.message) and PARAM in err.message, err.message
    again = _abort_error(reason["message"], 400, PLAN)  # non-streamed: ValueError
    assert (type(again), again.param, again.message) == (InvalidRequestError, PARAM, err.message)


def test_a_grammar_failure_without_a_client_constraint_is_the_servers() -> None:
    err = _abort_error(COMPILE_FAILED["message"], 400, GenerationPlan((1,), 4, SamplingOptions()))
    assert (type(err), err.status, err.code) == (EngineError, 500, "grammar_engine_error")
    assert _clean(err.message)


def test_a_grammar_neither_library_could_serve_for_a_server_reason_is_a_500() -> None:
    """runtime_ext.grammar_route: llguidance failed and no xgrammar form came with the grammar (or
    xgrammar raised): SGLang's usual 400 abort, but the server's fault, and no internals leak."""
    message = f"Failed to compile ebnf grammar: {ENGINE_FAULT}: llguidance build failed and no xgrammar form was sent"
    with pytest.raises(EngineError) as info:
        _finish_reason({"finish_reason": {"type": "abort", "status_code": 400, "message": message}}, PLAN)
    err = info.value
    assert (err.status, err.code, err.param) == (500, "grammar_engine_error", None)
    assert _clean(err.message) and "llguidance" not in err.message and ENGINE_FAULT not in err.message


def test_other_aborts_keep_their_text() -> None:
    err = _abort_error("Abort in waiting queue", None, PLAN)
    assert type(err) is EngineError and err.message == "the engine aborted the request: Abort in waiting queue"
    assert _abort_error("input is too long", 400, PLAN).message == "the engine rejected the request: input is too long"

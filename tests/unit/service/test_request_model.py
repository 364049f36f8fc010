"""The request model and its error envelopes (pure: FastAPI with the service's error handlers,
no engine): typed fields are strict, an assistant message the server returned is accepted
back, an unknown model is a 404."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.errors import error_response, install_error_handlers
from service.errors import InvalidRequestError, ModelNotFoundError
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=100, max_n=4, default_max_tokens=None)
USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def body(**kw):
    return {"model": "m", "messages": [USER], **kw}


@pytest.fixture(scope="module")
def client():
    """The request model behind a route, with the service's error handlers (the real app's
    gate refuses everything before its engine is up)."""
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/chat/completions")
    async def chat(request: ChatCompletionRequest) -> dict:
        return {"ok": True}

    return TestClient(app)


# --- strict typed fields: no coercion (OpenAI rejects "yes" for a boolean) -------------------

STRICT = [
    # (overrides, the field's dotted path)
    ({"stream": "yes"}, "stream"),
    ({"stream": 1}, "stream"),
    ({"stream": "true"}, "stream"),
    ({"n": "2"}, "n"),
    ({"n": 2.0}, "n"),
    ({"n": True}, "n"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"max_completion_tokens": 5.5}, "max_completion_tokens"),
    ({"seed": "1"}, "seed"),
    ({"temperature": "0.5"}, "temperature"),
    ({"top_p": True}, "top_p"),
    ({"presence_penalty": "1"}, "presence_penalty"),
    ({"frequency_penalty": False}, "frequency_penalty"),
    ({"parallel_tool_calls": "false", "tools": [TOOL]}, "parallel_tool_calls"),
    ({"stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
    ({"enable_thinking": 0}, "enable_thinking"),
    ({"allow_schema_loosening": "no"}, "allow_schema_loosening"),
    ({"max_reasoning_tokens": "10"}, "max_reasoning_tokens"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools.0.function.strict"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": 1}}},
        "response_format.json_schema.strict",
    ),
    ({"user": 5}, "user"),
]


@pytest.mark.parametrize("overrides, param", STRICT, ids=[p for _, p in STRICT])
def test_typed_fields_are_strict(client, overrides, param):
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate(body(**overrides))
    resp = client.post("/v1/chat/completions", json=body(**overrides))
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["code"] == "invalid_value"
    assert "must be a JSON" in err["message"] or "valid string" in err["message"], err["message"]


def test_stream_as_a_string_says_what_to_send(client):
    err = client.post("/v1/chat/completions", json=body(stream="yes")).json()["error"]
    assert err["message"] == "'stream': must be a JSON boolean, true or false (not a string or a number)"


def test_an_integer_is_still_a_valid_number():
    req = ChatCompletionRequest.model_validate(body(temperature=1, top_p=1, presence_penalty=0, stream=True))
    assert req.temperature == 1.0 and isinstance(req.temperature, float) and req.stream is True


# --- an assistant message the server returned, sent back as history ---------------------------


def test_returned_message_with_reasoning_and_nulls_is_accepted():
    returned = {
        "role": "assistant",
        "content": "yes",
        "reasoning_content": "let me think",
        "reasoning": "let me think",
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": None,
    }
    v = validate_request(ChatCompletionRequest.model_validate(body(messages=[USER, returned, USER])), LIMITS)
    assert (v.messages[1].content, v.messages[1].reasoning) == ("yes", "let me think")
    assert v.messages[0].reasoning is None


@pytest.mark.parametrize(
    "fields, reasoning",
    [
        ({"reasoning_content": None, "reasoning": None}, None),  # a model without reasoning (SmolLM2)
        ({"reasoning_content": "r"}, "r"),
        ({"reasoning": "r"}, "r"),
        ({"reasoning_content": "", "reasoning": ""}, ""),  # budget 0: an empty reasoning
    ],
)
def test_either_reasoning_field_reaches_the_message(fields, reasoning):
    returned = {"role": "assistant", "content": "a", **fields}
    v = validate_request(ChatCompletionRequest.model_validate(body(messages=[USER, returned, USER])), LIMITS)
    assert v.messages[1].reasoning == reasoning


def test_tool_call_turn_with_reasoning_and_null_content():
    returned = {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "r", "reasoning": "r"}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    v = validate_request(ChatCompletionRequest.model_validate(body(messages=[USER, returned, result])), LIMITS)
    assert (v.messages[1].content, v.messages[1].reasoning, v.messages[1].tool_calls[0].id) == ("", "r", "call_1")
    # a reasoning-only turn (max_tokens spent while reasoning) may come back without content too
    only = {"role": "assistant", "content": None, "reasoning_content": "r"}
    v = validate_request(ChatCompletionRequest.model_validate(body(messages=[USER, only, USER])), LIMITS)
    assert v.messages[1].content == ""


@pytest.mark.parametrize(
    "message, param",
    [
        ({"role": "user", "content": "x", "reasoning_content": "r"}, "messages.1.reasoning_content"),
        ({"role": "system", "content": "x", "reasoning": "r"}, "messages.1.reasoning"),
        ({"role": "assistant", "content": "x", "reasoning_content": "a", "reasoning": "b"}, "messages.1.reasoning"),
    ],
)
def test_reasoning_misplaced_or_disagreeing_is_a_400(message, param):
    with pytest.raises(InvalidRequestError) as err:
        validate_request(ChatCompletionRequest.model_validate(body(messages=[USER, message])), LIMITS)
    assert err.value.param == param


@pytest.mark.parametrize(
    "field, value, code, words",
    [
        ("refusal", "I can't", "invalid_value", "only accepted as null"),
        ("function_call", {"name": "f", "arguments": "{}"}, "invalid_value", "only accepted as null"),
        ("annotations", [], "invalid_value", "only accepted as null"),
        ("reasoning_content", 5, "invalid_value", "valid string"),
        ("thoughts", "r", "unsupported_parameter", "unknown or unsupported"),  # other fields: still refused
    ],
)
def test_fields_the_server_never_returns_are_refused(client, field, value, code, words):
    message = {"role": "assistant", "content": "x", field: value}
    resp = client.post("/v1/chat/completions", json=body(messages=[USER, message]))
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert (err["param"], err["code"]) == (f"messages.1.{field}", code) and words in err["message"], err


# --- unknown model: 404 model_not_found, as OpenAI ---------------------------------------------


def test_unknown_model_is_a_404_model_not_found():
    with pytest.raises(ModelNotFoundError) as err:
        validate_request(ChatCompletionRequest.model_validate(body(model="gpt-4o")), LIMITS)
    resp = error_response(err.value)
    assert resp.status_code == 404
    assert json.loads(resp.body)["error"] == {
        "message": "model 'gpt-4o' is not served here; use 'm' (see GET /v1/models)",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }

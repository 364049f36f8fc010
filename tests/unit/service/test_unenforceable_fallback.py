"""The constraints stage for a response_format schema no grammar enforces whole: what it defers to
llguidance's own compiler, and what it serves if that refuses too (``grammar.unenforceable``):
the grammar without the keywords, validated and resampled (``must_validate``) for a non-streamed
request; a 400 with a hint for a streamed one; a plain 400 with ``refuse``."""

from __future__ import annotations

import json

import pytest

from grammars.errors import GrammarError
from runtime_ext.formats import get_format
from service.pipeline.constraints import STREAM_HINT, build_constraint
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ModelFormats, ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=100, max_n=4, default_max_tokens=None)
UNIQUE = {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 3, "uniqueItems": True}


def _request(stream: bool = False, **fields):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": UNIQUE}},
        "stream": stream,
        **fields,
    }
    return validate_request(ChatCompletionRequest.model_validate(body), LIMITS, ModelFormats(tools=get_format("qwen")))


def test_a_non_streamed_request_falls_back_to_the_loosened_grammar_validated_and_resampled() -> None:
    constraint = build_constraint(_request(), False, resample=True)
    assert constraint is not None and [u.keyword for u in constraint.unenforced] == ["uniqueItems"]
    assert json.loads(constraint.value) == UNIQUE  # llguidance's compiler is asked for the whole schema first
    fallback = constraint.fallback
    assert fallback is not None and fallback.must_validate and fallback.loosened == ("uniqueItems at /",)
    assert "uniqueItems" not in json.loads(fallback.value) and fallback.validate_schema == UNIQUE
    assert fallback.param == constraint.param == "response_format.json_schema.schema"


@pytest.mark.parametrize(
    ("stream", "resample", "hint"), [(True, True, STREAM_HINT), (False, False, ""), (True, False, "")]
)
def test_otherwise_no_fallback_and_a_streamed_request_is_told_how(stream: bool, resample: bool, hint: str) -> None:
    constraint = build_constraint(_request(stream), False, resample=resample)
    assert constraint is not None and constraint.unenforced and constraint.fallback is None
    assert constraint.hint == hint


def test_the_clients_own_loosening_keeps_its_meaning() -> None:
    constraint = build_constraint(_request(allow_schema_loosening=True), False, resample=True)
    assert constraint is not None and not constraint.unenforced and not constraint.must_validate
    assert constraint.loosened == ("uniqueItems at /",)


def test_tools_never_defer() -> None:
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": UNIQUE}}},
    }
    with pytest.raises(GrammarError):
        build_constraint(_request(tools=[tool], tool_choice="required", response_format=None), False, resample=True)

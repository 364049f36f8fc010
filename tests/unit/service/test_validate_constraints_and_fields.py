"""The validate stage's output constraints, logprobs and other servers' field names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.errors import InvalidRequestError, UnsupportedParameterError
from service.pipeline.validate import validate_completion, validate_request
from service.protocol.completions import CompletionRequest
from service.protocol.openai import ChatCompletionRequest
from service.types.request import JsonOutputSpec, PatternOutputSpec
from service.types.serving import ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=100, max_n=4, default_max_tokens=None)


def req(**kw):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    return validate_request(ChatCompletionRequest.model_validate(body), LIMITS)


def refused(**kw) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as err:
        req(**kw)
    return err.value


@pytest.mark.parametrize(
    "fields, spec",
    [
        ({"structured_outputs": {"regex": "a+"}}, PatternOutputSpec("regex", "structured_outputs.regex", "a+")),
        (
            {"structured_outputs": {"choice": ["x", "y"]}},
            PatternOutputSpec("choice", "structured_outputs.choice", choices=("x", "y")),
        ),
        (
            {"structured_outputs": {"grammar": 'root ::= "a"'}},
            PatternOutputSpec("grammar", "structured_outputs.grammar", 'root ::= "a"'),
        ),
        (
            {"response_format": {"type": "regex", "regex": "b"}},
            PatternOutputSpec("regex", "response_format.regex", "b"),
        ),
        (
            {"response_format": {"type": "choice", "choice": ["p"]}},
            PatternOutputSpec("choice", "response_format.choice", choices=("p",)),
        ),
        (
            {"response_format": {"type": "grammar", "grammar": 'start: "a"'}},
            PatternOutputSpec("grammar", "response_format.grammar", 'start: "a"'),
        ),
        ({"regex": "c"}, PatternOutputSpec("regex", "regex", "c")),
        ({"ebnf": 'root ::= "d"'}, PatternOutputSpec("grammar", "ebnf", 'root ::= "d"')),
    ],
)
def test_each_field_name_gives_the_same_pattern_constraint(fields, spec):
    v = req(**fields)
    assert v.pattern_output == spec and v.json_output is None


def test_structured_outputs_json_as_object_or_text():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    for value in (schema, '{"type": "object", "properties": {"a": {"type": "integer"}}}'):
        v = req(structured_outputs={"json": value})
        assert v.json_output == JsonOutputSpec(schema, None, "structured_outputs.json")
    assert req(structured_outputs={"json_object": True}).json_output == JsonOutputSpec(
        None, None, "structured_outputs.json_object"
    )
    assert refused(structured_outputs={"json": "{nope"}).param == "structured_outputs.json"


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
        ({"structured_outputs": {}}, "structured_outputs"),
        ({"structured_outputs": {"json_object": False}}, "structured_outputs.json_object"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
        ({"structured_outputs": {"choice": ["a", ""]}}, "structured_outputs.choice"),
        ({"structured_outputs": {"regex": " "}}, "structured_outputs.regex"),
        ({"response_format": {"type": "regex"}}, "response_format.regex"),
        ({"response_format": {"type": "json_object", "regex": "a"}}, "response_format.regex"),
        ({"response_format": {"type": "json_object"}, "regex": "a"}, "regex"),
        ({"structured_outputs": {"regex": "a"}, "ebnf": 'root ::= "a"'}, "ebnf"),
    ],
)
def test_conflicting_or_empty_constraints_are_a_400_naming_the_field(fields, param):
    assert refused(**fields).param == param


def test_unknown_structured_outputs_field_is_refused():
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [], "structured_outputs": {"whitespace_pattern": " "}}
        )


def test_logprobs_fields():
    assert req().logprobs is None
    assert req(logprobs=True).logprobs == 0
    assert req(logprobs=True, top_logprobs=20).logprobs == 20
    assert refused(top_logprobs=3).param == "top_logprobs"
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({"model": "m", "messages": [], "logprobs": True, "top_logprobs": 21})


def test_sampler_fields_of_other_servers_reach_the_sampling_options():
    s = req(top_k=5, min_p=0.1, repetition_penalty=1.3).sampling
    assert (s.top_k, s.min_p, s.repetition_penalty) == (5, 0.1, 1.3)
    assert req(top_k=0).sampling.top_k == -1 and req().sampling.top_k == -1
    assert req().sampling.repetition_penalty == 1.0 and req().sampling.min_p == 0.0
    for bad in ({"top_k": -2}, {"min_p": 1.5}, {"repetition_penalty": 0}):
        with pytest.raises(ValidationError):
            ChatCompletionRequest.model_validate({"model": "m", "messages": [], **bad})


@pytest.mark.parametrize("name", ["max_reasoning_tokens", "max_thinking_tokens", "thinking_token_budget"])
def test_reasoning_budget_aliases(name):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], name: 7}
    assert ChatCompletionRequest.model_validate(body).max_reasoning_tokens == 7


def completion(**kw):
    return validate_completion(CompletionRequest.model_validate({"model": "m", "prompt": "hi", **kw}), LIMITS)


def test_completion_request_validation():
    v = completion(logprobs=2, echo=True, structured_outputs={"choice": ["a"]})
    assert v.logprobs == 2 and v.echo and v.prompt_param == "prompt" and v.max_tokens == 16
    assert v.pattern_output == PatternOutputSpec("choice", "structured_outputs.choice", choices=("a",))
    with pytest.raises(UnsupportedParameterError) as err:
        completion(echo=True, logprobs=1, stream=True)
    assert err.value.param == "echo"
    with pytest.raises(InvalidRequestError) as err2:
        completion(max_tokens=0)
    assert err2.value.param == "max_tokens"

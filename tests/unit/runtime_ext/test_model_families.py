"""The model-family registry: every format lookup by ``model_type`` reads ``MODEL_FAMILIES``."""

from __future__ import annotations

import pytest

from runtime_ext.formats import (
    MODEL_FAMILIES,
    ModelFamily,
    get_format,
    get_reasoning_format,
    select_format,
    select_reasoning_format,
)
from runtime_ext.formats.families import by_model_type, select_family

CASES = [pytest.param(family, t, id=t) for family in MODEL_FAMILIES for t in family.model_types]


@pytest.mark.parametrize("family, model_type", CASES)
def test_auto_selection_reads_the_family_record(family: ModelFamily, model_type: str) -> None:
    assert select_format("auto", model_type, template_renders_tools=True) is family.tool_format
    assert select_format("auto", model_type, template_renders_tools=False) is get_format("generic")
    assert select_reasoning_format("auto", model_type) is family.reasoning


def test_a_model_type_belongs_to_one_family() -> None:
    qwen = get_format("qwen")
    with pytest.raises(ValueError, match="'qwen3' is in two families"):
        by_model_type([ModelFamily("a", ("qwen3",), qwen), ModelFamily("b", ("x", "qwen3"), qwen)])


# Lines of the official templates (llama.cpp models/templates copies) that choose the family.
KIMI_K2_THINKING_LINE = (  # moonshotai-Kimi-K2-Thinking.jinja, render_toolcalls
    "<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}<|tool_call_begin|>{{ formatted_id }}"
    "<|tool_call_argument_begin|>{{ tool_call['function']['arguments'] }}<|tool_call_end|>"
)
GPT_OSS_LINE = (  # openai-gpt-oss-120b.jinja, an assistant tool call in history
    '{{- "<|start|>assistant to=" }}{{- "functions." + tool_call.name + "<|channel|>commentary " }}'
)
DEEPSEEK_V31_LINE = (  # deepseek-ai-DeepSeek-V3.1.jinja
    "{{'<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>'+ tool['function']['name'] + "
    "'<\uff5ctool\u2581sep\uff5c>' + tool['function']['arguments'] + '<\uff5ctool\u2581call\u2581end\uff5c>'}}"
)
DEEPSEEK_V32_LINE = '{%- set dsml_token = "\uff5cDSML\uff5c" -%}'  # DeepSeek-V3.2.jinja


@pytest.mark.parametrize(
    "model_type, template, family, tools, reasoning",
    [
        ("kimi_k2", KIMI_K2_THINKING_LINE, "kimi_k2", "kimi_k2", "qwen3"),
        ("deepseek_v3", KIMI_K2_THINKING_LINE, "kimi_k2", "kimi_k2", "qwen3"),  # the template decides
        ("gpt_oss", GPT_OSS_LINE, "gpt_oss", "harmony", "harmony"),
        ("gpt_oss", None, "gpt_oss", "harmony", "harmony"),
        ("deepseek_v3", DEEPSEEK_V31_LINE, "deepseek_v31", "deepseek_v31", "deepseek_v31"),
        ("deepseek_v3", None, "deepseek_v3", "deepseek_v3", "deepseek_r1"),
        ("deepseek_v32", DEEPSEEK_V32_LINE, "deepseek_v32", "deepseek_v32", "deepseek_v32"),
    ],
)
def test_the_family_record_chooses_tool_and_reasoning_formats(
    model_type: str, template: str | None, family: str, tools: str, reasoning: str
) -> None:
    chosen = select_family(model_type, template)
    assert chosen is not None and chosen.name == family
    assert select_format("auto", model_type, True, template).name == tools
    selected = select_reasoning_format("auto", model_type, chat_template=template)
    assert selected is not None and selected.name == reasoning
    assert select_reasoning_format("none", model_type, chat_template=template) is None  # config overrides
    assert select_format("qwen", model_type, True, template).name == "qwen"


def test_the_thinking_switch_goes_to_a_template_that_opens_the_block_itself() -> None:
    v31 = select_reasoning_format("auto", "deepseek_v3", chat_template=DEEPSEEK_V31_LINE)
    assert v31 is not None and v31.template_kwargs(False) == (("thinking", False),)
    assert v31.prompt_suffix(True) == v31.prompt_suffix(False) == ""  # the template writes <think> or </think>
    qwen3 = select_reasoning_format("auto", "qwen3")
    assert qwen3 is not None and qwen3.template_kwargs(True) == ()  # the service writes the block
    family = select_family("deepseek_v3", DEEPSEEK_V31_LINE)
    assert family is not None and family.thinking_switch == v31.template_switch == "thinking"


@pytest.mark.parametrize(
    ("effort", "level"), [("minimal", "low"), ("low", "low"), ("medium", "medium"), ("xhigh", "high")]
)
def test_gpt_oss_reasoning_effort_is_what_its_template_reads(effort: str, level: str) -> None:
    harmony = get_reasoning_format("harmony")
    assert harmony.effort_kwargs(effort) == (("reasoning_effort", level),)
    assert harmony.effort_kwargs("none") == harmony.effort_kwargs(None) == ()
    assert get_reasoning_format("qwen3").effort_kwargs("high") == ()


def test_every_family_names_its_end_of_turn_tokens() -> None:
    assert all(family.end_of_turn for family in MODEL_FAMILIES)
    gpt_oss = select_family("gpt_oss")
    assert gpt_oss is not None and gpt_oss.end_of_turn == ("<|return|>", "<|call|>")


TEMPLATES = __import__("pathlib").Path(__file__).resolve().parents[2] / "family_templates"


@pytest.mark.parametrize(
    "template, wants_text",
    [("deepseek_v31.jinja", True), ("glm45.jinja", False), ("kimi_k2.jinja", False), ("gpt_oss.jinja", False)],
)
def test_a_template_that_concatenates_call_arguments_gets_them_as_text(template: str, wants_text: bool) -> None:
    """DeepSeek-V3.1's template writes ``'<｜tool▁sep｜>' + tool['function']['arguments']``: given the
    object most templates read (``| tojson``, ``.items()``) it raises, so the service passes the
    client's JSON text to it (probed once, ``template_wants_string_arguments``)."""
    from runtime_ext.formats import template_wants_string_arguments

    assert template_wants_string_arguments((TEMPLATES / template).read_text(encoding="utf-8")) is wants_text

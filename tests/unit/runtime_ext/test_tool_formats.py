"""Format registry, canonical rendering, the generic tools prompt and template detection."""

from __future__ import annotations

import json

import pytest

from runtime_ext.formats import (
    FORMAT_NAMES,
    NamedChoice,
    UnknownFormatError,
    get_format,
    render_call,
    render_calls,
    render_tools_prompt,
    template_renders_tools,
)
from runtime_ext.parsers import parse

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_registry_names_aliases_and_unknown() -> None:
    assert FORMAT_NAMES == (
        "qwen",
        "llama3",
        "mistral",
        "deepseek_v3",
        "pythonic",
        "generic",
        "qwen3_coder",
        "glm45",
        "deepseek_v31",
        "kimi_k2",
        "harmony",
        "deepseek_v32",
    )
    assert get_format("hermes") is get_format("qwen") and get_format(get_format("llama3")).name == "llama3"
    with pytest.raises(UnknownFormatError) as info:
        get_format("chatml")
    assert isinstance(info.value, KeyError)
    assert all(name in str(info.value) for name in FORMAT_NAMES)


def test_formats_are_frozen() -> None:
    with pytest.raises(AttributeError):
        get_format("qwen").call_start = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "qwen",
            '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>',
        ),
        (
            "generic",
            '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n<tool_call>{"name": "g", "arguments": {}}</tool_call>',
        ),
        ("llama3", '{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}'),
        ("mistral", '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]'),
        ("pythonic", "[f(a=1), g()]"),
        (  # SGLang's deepseekv31_detector.py docstring; llama.cpp deepseek-ai-DeepSeek-V3.1.jinja
            "deepseek_v31",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜>'
            "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ),
        (  # SGLang's kimik2_detector.py docstring; llama.cpp moonshotai-Kimi-K2-Thinking.jinja (id functions.NAME:IDX)
            "kimi_k2",
            '<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a": 1}'
            "<|tool_call_end|><|tool_call_begin|>functions.g:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
            "<|tool_calls_section_end|>",
        ),
        (  # SGLang's gpt_oss_detector.py (to=functions.NAME, <|constrain|>json, <|call|>); calls are separate messages
            "harmony",
            '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>'
            "<|start|>assistant<|channel|>commentary to=functions.g <|constrain|>json<|message|>{}<|call|>",
        ),
        (  # SGLang's deepseekv32_detector.py docstring (Format 2, a JSON body); llama.cpp DeepSeek-V3.2.jinja's layout
            "deepseek_v32",
            '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n{"a": 1}\n</｜DSML｜invoke>\n'
            '<｜DSML｜invoke name="g">\n{}\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
        ),
        (
            "deepseek_v3",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a": 1}\n```<｜tool▁call▁end｜>\n'
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ),
    ],
)
def test_canonical_rendering_matches_the_model_families(name: str, expected: str) -> None:
    calls = [("f", '{"a": 1}'), ("g", "{}")]
    assert render_calls(get_format(name), calls) == expected
    assert [(c.name, c.arguments) for c in parse(name, expected).calls] == [("f", '{"a":1}'), ("g", "{}")]


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_tools_prompt_lists_tools_and_exact_syntax(name: str) -> None:
    fmt = get_format(name)
    json_args = name not in ("pythonic", "qwen3_coder", "glm45")
    prompt = render_tools_prompt([WEATHER], fmt, "required")
    assert "get_weather: Current weather for a city." in prompt
    assert json.dumps(WEATHER["function"]["parameters"], separators=(",", ":")) in prompt
    assert render_call(fmt, "FUNCTION_NAME", '{"ARGUMENT": VALUE}' if json_args else '{"ARGUMENT": "VALUE"}') in prompt
    assert "must call at least one" in prompt
    assert "must call the function get_weather" in render_tools_prompt([WEATHER], fmt, NamedChoice("get_weather"))
    assert "only when it helps" in render_tools_prompt([WEATHER["function"]], fmt)


def test_tools_prompt_rejects_nameless_tools() -> None:
    with pytest.raises(ValueError):
        render_tools_prompt([{"type": "function", "function": {"description": "x"}}], get_format("generic"))


@pytest.mark.parametrize(
    "template, expected",
    [
        (None, False),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", False),
        ("{% if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}", True),
        ("{% if tools %}{{ raise_exception('no tools') }}{% endif %}{{ messages[0].content }}", False),
        ("{{ tools | tojson(indent=2) }}", True),
        ("{% if tools %}", False),
    ],
)
def test_template_renders_tools(template: str | None, expected: bool) -> None:
    assert template_renders_tools(template) is expected

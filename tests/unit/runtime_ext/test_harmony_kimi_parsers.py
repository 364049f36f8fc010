"""Kimi-K2 and gpt-oss Harmony outputs parsed into content, calls and reasoning.

The texts are written as SGLang 0.5.23's ``kimik2_detector.py`` / ``gpt_oss_detector.py``
and the official templates write them (llama.cpp ``models/templates``); split parity and
the random grammar walks cover them too (``test_parser_split_parity.py``,
``tests/unit/grammars``).
"""

from __future__ import annotations

import pytest

from runtime_ext.formats import get_format, get_reasoning_format
from runtime_ext.parsers import parse, parse_reasoning

KIMI = get_format("kimi_k2")
HARMONY = get_format("harmony")
NAMES = ["get_weather", "f"]


def calls(result: object) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in result.calls]  # type: ignore[attr-defined]


def test_kimi_section_with_counters_is_two_calls_and_the_text_around() -> None:
    text = (
        "Checking. <|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:3<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 2}<|tool_call_end|>\n<|tool_call_begin|>functions.f:4<|tool_call_argument_begin|>{}'
        "<|tool_call_end|>\n<|tool_calls_section_end|>"
    )
    result = parse(KIMI, text, NAMES)
    assert calls(result) == [("get_weather", '{"city":"Paris","days":2}'), ("f", "{}")]
    assert result.content == "Checking." and not result.incomplete


@pytest.mark.parametrize("call_id", ["functions.f", "functions.f:", "functions.f:x1", "functions.nope:0"])
def test_kimi_call_without_a_counter_or_known_name_is_content(call_id: str) -> None:
    text = f"<|tool_calls_section_begin|><|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{{}}<|tool_call_end|>"
    result = parse(KIMI, text, NAMES)
    assert result.calls == [] and result.content == text


def test_kimi_name_keeps_colons_before_the_counter() -> None:
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:b:7<|tool_call_argument_begin|>{}<|tool_call_end|>"
    )
    assert calls(parse(KIMI, text)) == [("a:b", "{}")]


def test_harmony_call_as_the_model_writes_it() -> None:
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    result = parse(HARMONY, text, NAMES)
    assert calls(result) == [("get_weather", '{"city":"Paris"}')] and result.content == ""


def test_harmony_call_as_the_template_renders_history() -> None:
    text = '<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{"a": [1, "<|call|>"]}<|call|>'
    assert calls(parse(HARMONY, text, NAMES)) == [("f", '{"a":[1,"<|call|>"]}')]


def test_harmony_headers_and_end_markers_never_reach_content() -> None:
    text = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>It is 7.<|return|>"
    result = parse(HARMONY, text, NAMES)
    assert result.content == "hmIt is 7." and result.calls == []


def test_harmony_builtin_recipient_and_unknown_function_are_content() -> None:
    browser = "<|channel|>commentary to=browser.open <|constrain|>json<|message|>{}<|call|>"
    unknown = "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}<|call|>"
    assert parse(HARMONY, browser, NAMES).content == browser
    assert parse(HARMONY, unknown, NAMES).content == unknown


def test_harmony_call_cut_by_max_tokens_is_incomplete() -> None:
    text = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1'
    result = parse(HARMONY, text, NAMES)
    assert result.incomplete and result.incomplete_text == text and result.calls == []


def test_harmony_reasoning_is_the_analysis_message_and_the_final_header_is_dropped() -> None:
    fmt = get_reasoning_format("harmony")
    out = parse_reasoning(fmt, "Need the weather.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.", True)
    assert (out.reasoning, out.content, out.ended) == ("Need the weather.", "Sunny.", True)
    call = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}"
    out = parse_reasoning(fmt, "plan<|end|>" + call, True)
    assert (out.reasoning, out.content) == ("plan", call)
    assert calls(parse(HARMONY, out.content, NAMES)) == [("f", "{}")]


def test_harmony_reasoning_is_closed_and_reopened_as_the_template_reads() -> None:
    fmt = get_reasoning_format("harmony")
    assert fmt.prompt_suffix(True) == "<|channel|>analysis<|message|>"
    assert fmt.prompt_suffix(False) == "<|channel|>analysis<|message|><|end|><|start|>assistant"
    assert fmt.forced_end == "<|end|><|start|>assistant"

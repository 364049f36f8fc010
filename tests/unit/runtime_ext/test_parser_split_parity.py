"""Split parity, run over every streaming parser in ``runtime_ext.parsers.catalog``: feeding
an output whole or split anywhere (every two-way split, char by char, random chunkings)
gives the same result and the same streamed events, and the events add up to the result.

A format added to a registry is covered here with samples rendered in it; a new parser
kind needs a sample builder in ``SAMPLES`` (the test fails with a KeyError until it has one).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from runtime_ext.formats import ReasoningFormat, ToolFormat, render_call, render_calls
from runtime_ext.formats.tool_formats import DEEPSEEK_CALLS_BEGIN
from runtime_ext.parsers import ParserEntry, StreamingParser, streaming_parsers

# --- samples (those of test_tool_call_parsers.py and test_reasoning_parser.py) ----------
PLAIN = ["", "  ", "Hello, world.\n", " a < b and [c] {d} ", "see <tool_ca", "[TOOL_CALLS", "x\n\n"]
TOOL_TEXTS: dict[str, list[str]] = {
    "qwen": [
        'Hi <tool_x <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
        'Sure.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {"q": "ab',
        "ok <tool_call>",
        "<tool_call>hello</tool_call>",
        '<tool_call>{"no": "name"}</tool_call>',
        "<tool_call>{bad json}</tool_call>",
        '<tool_call>\n{"arguments": {"b": [1, 2]}, "name": "f"}\n</tool_call>',
        '<tool_call>\n{"name": "f", "arguments": "{\\"b\\": 1}"}\n</tool_call>',
        '<tool_call>\n{"id": 3, "name": "f", "parameters": {}}\n</tool_call>',
        '<tool_call>\n{"name": "f", "arguments": {"b": 1}, "extra": [1, {"c": "}"}]}\n</tool_call>',
        '{"answer": 42}',
        '{"name": "f", "arguments": {"a": 1}}\n{"name": "g", "arguments": {}}\nDone.',
    ],
    "generic": [
        'a <tool_call>{"name": "f", "arguments": {"x": tru}}</tool_call> b',
        '<tool_call>{"name": "f", "arguments": { "a" : 1.50 , "b": "\\u00e9\\/\\ud83d\\ude00", "c": 1E2, "d": -0 }}</tool_call>',
    ],
    "llama3": [
        '<|python_tag|>brave_search.call(query="x")',
        'Let me check. <|python_tag|>{"name": "f", "arguments": {"a": 1}}; {"name": "g", "parameters": {}}',
    ],
    "mistral": [
        "[TOOL_CALLS] []",
        '[TOOL_CALLS] [{"name": "x", "arguments": {}}, {"name": "f", "arguments": {"a": 1}}]',
    ],
    "deepseek_v3": [DEEPSEEK_CALLS_BEGIN + "\n", DEEPSEEK_CALLS_BEGIN + "<\uff5ctool\u2581ca"],
    "deepseek_v31": [
        DEEPSEEK_CALLS_BEGIN + "<\uff5ctool\u2581call\u2581begin\uff5c>f<\uff5ctool\u2581sep\uff5c>[1]",
        DEEPSEEK_CALLS_BEGIN + "<\uff5ctool\u2581call\u2581begin\uff5c>f\n<\uff5ctool\u2581sep\uff5c> {}",
    ],
    "qwen3_coder": [
        "<tool_call>\n<function=f>\n<parameter=a>\n7\n</parameter>\n<parameter=q>\n null \n</parameter>\n</function>",
        '<tool_call>\n<function=f>\n<parameter=o>\n{"s": "</parameter>"}\n</parameter>\n</function>\n</tool_call>',
        "<tool_call>\n<function=f>\n<parameter=a>\nx</parameter>\n<bogus>\n</function>",
        "<tool_call><function=g></function></tool_call> <tool_call><function=rm>\n</function></tool_call> tail",
        "<tool_call>\n<function=f\n<parameter=a>",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</param",
    ],
    "glm45": [
        "<tool_call>f<arg_key>a</arg_key><arg_value>7</arg_value><arg_key>q</arg_key><arg_value>null</arg_value></tool_call>",
        '<tool_call>f\n<arg_key>o</arg_key>\n<arg_value>[1, "</arg_value>"]</arg_value>\n</tool_call>',
        "<tool_call>f\n<arg_key>a</arg_key>\n<bogus>\n</tool_call>",
        "<tool_call>g\n</tool_call><tool_call>rm\n</tool_call> tail <tool_call>",
    ],
    "kimi_k2": [
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f<|tool_call_argument_begin|>{}<|tool_call_end|>",
        '<|tool_calls_section_begin|>\n<|tool_call_begin|> functions.f:12 <|tool_call_argument_begin|> {"a": 7}'
        "<|tool_call_end|>\n<|tool_calls_section_end|> after",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:x<|tool_call_argument_begin|>{}<|tool_call_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argu",
    ],
    "deepseek_v32": [
        '<\uff5cDSML\uff5cfunction_calls><\uff5cDSML\uff5cinvoke name="f">{"a": 7}</\uff5cDSML\uff5cinvoke>',
        '<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name="f">\n<\uff5cDSML\uff5cparameter name="a"',
    ],
    "harmony": [
        "<|channel|>final<|message|>The answer.<|return|>",
        "<|channel|>analysis<|message|>plan<|end|><|start|>assistant<|channel|>final<|message|>Done.",
        '<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{"a": 1}<|call|>',
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": [1, "<|call|>"]}<|call|>',
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>not json<|call|>",
        "<|channel|>commentary to=browser.open <|constrain|>json<|message|>{}<|call|>",
        "<|channel|>final to=functions.f <|constrain|>json x y<|message|>{}",
        "a <|bogus|> b <|end|> c <|start|>assistant<|chan",
        "<|channel|>commentary to=functions.f <|constrain|>js",
    ],
    "pythonic": [
        "[1, 2]",
        "[foo(1)]",
        "[foo(a=b)]",
        "[] x",
        "[unknown(a=1)]",
        "[f(a=1",
        "[f(a=(1, 2), b={'k': None}, c=True, d=-1.5), g.h()]",
    ],
}
TRICKY_ARGUMENTS = '{"q": "a</tool_call>\\"b\\\\ ]}) é 😀", "n": [1, {"x": null}]}'
REASONING_TEXTS = [
    "let me think</think>\n\nThe answer is 42.",
    "short</think>answer",
    "never closes the block because max_tokens cut it </thi",
    "",
    "</think>",
    "é ünïcode 🙂 reasoning</think>  \n 答案",
    "<think>nested?</think> then </think> again",
    'a < b and c </ d </think>{"ok": true}',
    "  <think>plan</think>\n\nanswer",
    "  no block here </think>",
    "step 1 </think> done",
]


def tool_samples(fmt: ToolFormat) -> list[str]:
    """Plain texts, canonical calls of ``fmt`` (alone, with text around, cut) and its examples."""
    one = render_call(fmt, "f", TRICKY_ARGUMENTS)
    two = render_calls(fmt, [("f", '{"a": 1}'), ("g", "{}")])
    unknown = render_call(fmt, "rm_rf", '{"path": "/"}')
    around = [f"Sure. {one} done", f"{two}\n\nThanks", f"{unknown} {one}"]
    cut = [one[: len(one) // 2], one[:-1], two[: len(two) - 3]]
    return [*PLAIN, one, two, unknown, *around, *cut, *TOOL_TEXTS.get(fmt.name, [])]


REASONING_EXTRA: dict[str, list[str]] = {
    "deepseek_v32": [
        '<\uff5cDSML\uff5cfunction_calls><\uff5cDSML\uff5cinvoke name="f">{"a": 7}</\uff5cDSML\uff5cinvoke>',
        '<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name="f">\n<\uff5cDSML\uff5cparameter name="a"',
    ],
    "harmony": [
        "plan<|end|><|start|>assistant<|channel|>final<|message|>The answer.",
        "plan<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}",
        "plan<|end|> <|channel|>final<|message|>x",
        "plan<|end|><|start|>assistant<|chan",
    ],
}


def reasoning_samples(fmt: ReasoningFormat) -> list[str]:
    texts = [t.replace("</think>", fmt.end).replace("<think>", fmt.start) for t in REASONING_TEXTS]
    return texts + REASONING_EXTRA.get(fmt.name, [])


SAMPLES: dict[str, Callable[[Any], list[str]]] = {"tool_calls": tool_samples, "reasoning": reasoning_samples}

# --- every parser, with the options the service varies ---------------------------------
GENERIC_REASONING = ReasoningFormat("generic", "[[plan]]", "[[/plan]]")
SCHEMAS = {"f": {"properties": {"a": {"type": "integer"}, "o": {"type": "object"}, "n": {"type": "array"}}}}
"""Types for the XML formats' raw values (the other formats ignore them)."""
VARIANTS = {
    "open": streaming_parsers(reasoning_formats=[GENERIC_REASONING]),
    "named": streaming_parsers(
        tool_names=["f", "g"], in_reasoning=False, reasoning_formats=[GENERIC_REASONING], tool_schemas=SCHEMAS
    ),
}
CASES = [
    pytest.param(entry, text, id=f"{entry.name}-{variant}-{i}")
    for variant, entries in VARIANTS.items()
    for entry in entries
    for i, text in enumerate(SAMPLES[entry.kind](entry.fmt))
]


# --- streaming and comparing ------------------------------------------------------------
def fold(events: Sequence[Any]) -> dict[str, Any]:
    """The events of one stream added up, field by field: text fields concatenated,
    call deltas merged per call index into [name, arguments]."""
    out: dict[str, Any] = {}
    for event in events:
        for field in dataclasses.fields(event):
            value = getattr(event, field.name)
            if isinstance(value, str):
                out[field.name] = out.get(field.name, "") + value
                continue
            calls = out.setdefault(field.name, {})
            for delta in value:
                call = calls.setdefault(delta.index, [delta.name, ""])
                call[1] += delta.arguments
    return out


def check_adds_up(result: Any, streamed: dict[str, Any]) -> dict[str, Any]:
    """The streamed events equal the result's same-named fields: text exactly, calls for
    every complete call; only an unfinished call (cut or malformed after its name was
    streamed: ``result.incomplete``) may have more deltas, which depend on the chunking.
    Returns ``streamed`` without those."""
    kept = dict(streamed)
    for name, value in streamed.items():
        expected = getattr(result, name)
        if isinstance(value, str):
            assert value == expected, f"events do not add up to result.{name}"
            continue
        assert {i: value[i] for i in range(len(expected))} == {c.index: [c.name, c.arguments] for c in expected}
        assert set(value) - set(range(len(expected))) <= ({len(expected)} if result.incomplete else set())
        kept[name] = {i: call for i, call in value.items() if i < len(expected)}
    return kept


def stream(entry: ParserEntry, chunks: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """(result, streamed events checked against it) of feeding ``chunks`` to a fresh
    parser, then finishing."""
    parser: StreamingParser[Any, Any] = entry.new()
    events = [parser.feed(chunk) for chunk in chunks]
    events.append(parser.finish())
    result = parser.result()
    return result, check_adds_up(result, fold(events))


def split(text: str, cuts: Sequence[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def chunkings(text: str) -> list[list[str]]:
    """Char by char; every two-way split (short texts) or 40 random ones; 10 random chunkings."""
    rng = random.Random(text)
    n = len(text)
    cuts = range(n + 1) if n <= 120 else sorted(rng.randrange(n + 1) for _ in range(40))
    out = [list(text)] + [split(text, [at]) for at in cuts]
    out += [split(text, [rng.randrange(n + 1) for _ in range(rng.randrange(1, 8))]) for _ in range(10)]
    return out


@pytest.mark.parametrize("entry, text", CASES)
def test_any_split_gives_the_whole_result_and_events(entry: ParserEntry, text: str) -> None:
    whole, whole_events = stream(entry, [text])
    for chunks in chunkings(text):
        result, events = stream(entry, chunks)
        assert result == whole, chunks
        assert events == whole_events, chunks


def test_every_registered_parser_has_samples() -> None:
    for entry in streaming_parsers():
        assert SAMPLES[entry.kind](entry.fmt), entry.name

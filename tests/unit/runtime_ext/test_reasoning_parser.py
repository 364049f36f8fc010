"""The reasoning parser: exact splits, and one-shot == any streaming of random texts (every
split of the corpus below, for every reasoning format: test_parser_split_parity.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_ext.formats import ReasoningFormat, select_reasoning_format
from runtime_ext.formats.reasoning_formats import DEEPSEEK_R1, QWEN3
from runtime_ext.parsers import ReasoningParser, parse_reasoning

GENERIC = ReasoningFormat("generic", "[[plan]]", "[[/plan]]")
CORPUS = [
    "let me think</think>\n\nThe answer is 42.",
    "short</think>answer",
    "never closes the block because max_tokens cut it </thi",
    "",
    "</think>",
    "é ünïcode 🙂 reasoning</think>  \n 答案",
    "<think>nested?</think> then </think> again",
    'a < b and c </ d </think>{"ok": true}',
]


def stream(fmt, text, cuts, in_reasoning):
    parser = ReasoningParser(fmt, in_reasoning)
    reasoning, content, last = [], [], 0
    for cut in [*cuts, len(text)]:
        event = parser.feed(text[last:cut])
        reasoning.append(event.reasoning)
        content.append(event.content)
        last = cut
    event = parser.finish()
    reasoning.append(event.reasoning)
    content.append(event.content)
    result = parser.result()
    assert "".join(reasoning) == result.reasoning and "".join(content) == result.content
    return result


def test_exact_splits():
    r = parse_reasoning(QWEN3, CORPUS[0], in_reasoning=True)
    assert (r.reasoning, r.content, r.started, r.ended) == ("let me think", "The answer is 42.", True, True)
    cut = parse_reasoning(QWEN3, CORPUS[2], in_reasoning=True)
    assert cut.reasoning == CORPUS[2] and cut.content == "" and not cut.ended  # flushed by finish()
    explicit = parse_reasoning(QWEN3, "  <think>plan</think>\n\nanswer", in_reasoning=False)
    assert (explicit.reasoning, explicit.content) == ("plan", "answer")
    plain = parse_reasoning(QWEN3, "  no block here </think>", in_reasoning=False)
    assert (plain.reasoning, plain.content, plain.started) == ("", "  no block here </think>", False)
    later = parse_reasoning(QWEN3, CORPUS[6], in_reasoning=True)
    assert (later.reasoning, later.content) == ("<think>nested?", "then </think> again")
    generic = parse_reasoning(GENERIC, "step 1 [[/plan]] done", in_reasoning=True)
    assert (generic.reasoning, generic.content) == ("step 1 ", "done")


PIECES = st.sampled_from(["<think>", "</think>", "</th", "<", "/", "think", ">", " ", "\n", "x", "é", "🙂", "ans"])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=12).map("".join), st.lists(st.integers(0, 60), max_size=6), st.booleans())
def test_random_texts_any_chunking(text, cuts, in_reasoning):
    cuts = sorted(c for c in cuts if c <= len(text))
    whole = parse_reasoning(QWEN3, text, in_reasoning)
    assert stream(QWEN3, text, cuts, in_reasoning) == whole
    # nothing is lost: reasoning + end marker + content covers the text
    if whole.ended:
        assert QWEN3.end in text
    elif in_reasoning:
        assert whole.reasoning == text and whole.content == ""


def test_prompt_suffixes_and_selection():
    assert QWEN3.prompt_suffix(True) == "<think>\n"
    assert QWEN3.prompt_suffix(False) == "<think>\n\n</think>\n\n"
    assert DEEPSEEK_R1.prompt_suffix(True) == "" and DEEPSEEK_R1.prompt_suffix(False) == "</think>\n\n"
    assert select_reasoning_format("auto", "qwen3") is QWEN3
    assert select_reasoning_format("auto", "llama") is None
    assert select_reasoning_format("generic", None, "<r>", "</r>").end == "</r>"
    with pytest.raises(KeyError, match="valid"):
        select_reasoning_format("qwen9", "qwen3")
    with pytest.raises(ValueError, match="start"):
        select_reasoning_format("generic", None)

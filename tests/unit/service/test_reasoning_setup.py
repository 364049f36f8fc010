"""The think markers are resolved per model family (format registry) in the serving tokenizer,
never taken from a table of ids: two vocabularies that place the markers at different ids give
plans with those ids (the real Qwen3 tokenizer: tests/offline/test_template_tools.py)."""

from __future__ import annotations

import re

import pytest

from runtime_ext.formats import REASONING_FORMATS, select_reasoning_format
from runtime_ext.formats.families import REASONING_BY_MODEL_TYPE as FAMILY_REASONING
from service.types.serving import ReasoningMarkerError, ReasoningSetup

PIECES = re.compile(r"<[^>]*>|\n+| +|[^<\n ]+")


def vocabulary(base: int):
    """A tiny word-level tokenizer: each tag, newline run, space run or word is one token, the
    ids numbered from ``base`` in order of first use."""
    ids: dict[str, int] = {}

    def encode(text: str) -> list[int]:
        return [ids.setdefault(piece, base + len(ids)) for piece in PIECES.findall(text)]

    return encode, ids


@pytest.mark.parametrize("family", sorted(FAMILY_REASONING))
def test_each_family_resolves_its_markers_in_the_serving_tokenizer(family):
    fmt = select_reasoning_format("auto", family)
    assert fmt is REASONING_FORMATS[FAMILY_REASONING[family]]
    plans = []
    for base in (10, 90_000):
        encode, ids = vocabulary(base)
        plan = ReasoningSetup.build(fmt, encode).plan(budget=8)
        assert plan.end_id == ids[fmt.end] and plan.end_text == fmt.end
        assert plan.forced_ids == tuple(encode(fmt.forced_end)) and plan.separator_ids == tuple(encode(fmt.separator))
        plans.append(plan)
    assert plans[0].end_id != plans[1].end_id  # follows the tokenizer, not a constant


def test_a_family_without_reasoning_has_no_markers():
    assert select_reasoning_format("auto", "llama") is None


XML_CALLS_TEMPLATE = "{{ '<tool_call>\\n<function=' }}{{ '<parameter=' }}"


@pytest.mark.parametrize("model_type, thinks", [("qwen3_moe", False), ("qwen3", False), ("qwen3_5", True)])
def test_a_template_family_without_reasoning_keeps_a_model_type_that_writes_other_calls_from_thinking(
    model_type, thinks
):
    """Qwen3-Coder (a ``qwen3_moe`` whose template teaches XML calls) never thinks; Qwen3.5 writes
    the same XML calls and thinks: the ``model_type``'s family decides only when it agrees."""
    fmt = select_reasoning_format("auto", model_type, chat_template=XML_CALLS_TEMPLATE)
    assert (fmt is REASONING_FORMATS["qwen3"]) if thinks else fmt is None


def test_a_marker_that_is_not_one_token_stops_the_server():
    def by_char(text: str) -> list[int]:
        return [ord(c) for c in text]

    with pytest.raises(ReasoningMarkerError, match="'<think>' is 7 tokens"):
        ReasoningSetup.build(REASONING_FORMATS["qwen3"], by_char)

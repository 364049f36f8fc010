"""Tool-call constraints compiled by real xgrammar, and by real llguidance after
``grammars.compile.llguidance_lark``'s translation, on the tiny Qwen3 tokenizer.

Each candidate output is tokenized and walked token by token through a matcher;
"accepted" means every token is allowed (in the mask, for llguidance) and EOS then
terminates. Accepted outputs are parsed back with our parser (round trip). Every test
runs on both libraries: the translation must accept and refuse the same outputs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import transformers  # noqa: E402
import xgrammar as xgr  # noqa: E402 -- pinned: a missing one is a failure, not a skip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assets import default_cache_dir
from grammars.compile import structural_tag_to_lark, text_tokens
from grammars.tool_calls import ToolSpec, tool_call_constraint
from runtime_ext.formats import get_format, render_calls
from runtime_ext.parsers import parse

TOKENIZER_DIR = default_cache_dir() / "models" / "qwen3-tiny"
FORMATS = ["qwen", "generic", "llama3", "mistral", "deepseek_v3", "deepseek_v31"]
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    strict=True,
)
NOOP = ToolSpec("noop")
SEARCH = ToolSpec("search", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
ANY = ToolSpec("any_args", {"type": "object"})
TOOLS = [WEATHER, NOOP, SEARCH]
GOOD = [
    ("get_weather", '{"city": "Paris", "days": 3}'),
    ("noop", "{}"),
    ("search", '{"q": "say \\"hi\\" \\\\ </tool_call> [TOOL_CALLS] <\uff5ctool\u2581call\u2581end\uff5c>\\n\u00e9"}'),
]


def json_grammar(schema: dict[str, Any]) -> str:
    """SGLang's json_schema JSON with constrained_json_disable_any_whitespace."""
    return str(xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False))


def _tokenizer() -> Any:
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.fail(f"tiny Qwen3 tokenizer not fetched ({TOKENIZER_DIR}); run `make assets`")
    return transformers.AutoTokenizer.from_pretrained(TOKENIZER_DIR)


class Walker:
    """Compiles constraints with xgrammar and walks candidate outputs token by token."""

    exact_json = True  # honours ``json_grammar`` (SGLang's whitespace-free JSON)

    def __init__(self) -> None:
        self.tokenizer = _tokenizer()
        info = xgr.TokenizerInfo.from_huggingface(self.tokenizer)
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)

    def compile(self, fmt: str, tools: list[ToolSpec], mode: str, **kwargs: Any) -> Any:
        return self.compiler.compile_structural_tag(tool_call_constraint(fmt, tools, mode, **kwargs).value)

    def accepts(self, grammar: Any, text: str) -> bool:
        matcher = xgr.GrammarMatcher(grammar)
        for token in self.tokenizer.encode(text, add_special_tokens=False):
            if not matcher.accept_token(token):
                return False
        return matcher.accept_token(self.tokenizer.eos_token_id) and matcher.is_terminated()


class GuidanceWalker:
    """The same constraint translated to llguidance Lark (what the service sends when
    ``grammar.backend`` is llguidance). ``json_grammar`` is an EBNF element the
    translation refuses, and the service never passes it: it is dropped here, so the
    arguments keep the bounded whitespace the service serves."""

    exact_json = False

    def __init__(self) -> None:
        from llguidance.hf import from_tokenizer

        self.tokenizer = _tokenizer()
        self.ll_tokenizer = from_tokenizer(self.tokenizer, eos_token=self.tokenizer.eos_token_id)
        self.tokens = text_tokens(json.loads((TOKENIZER_DIR / "tokenizer.json").read_text()))

    def compile(self, fmt: str, tools: list[ToolSpec], mode: str, **kwargs: Any) -> str:
        kwargs.pop("json_grammar", None)
        return structural_tag_to_lark(tool_call_constraint(fmt, tools, mode, **kwargs).value, self.tokens)

    def spelled(self, text: str) -> list[int]:
        """Hugging Face's tokens of ``text``, except that an added token inside a JSON string
        is spelled one character at a time: llguidance never lets an added token stand inside
        a JSON string (the text stays writable), while a literal that spells one (a marker
        such as ``<tool_call>``) is that token, as the model writes it."""
        added, ids, quoted, escaped = set(self.tokens.values()), [], False, False
        for token in self.tokenizer.encode(text, add_special_tokens=False):
            piece = self.tokenizer.decode([token])
            if token in added and quoted:
                ids += [t for c in piece for t in self.tokenizer.encode(c, add_special_tokens=False)]
                continue
            ids.append(token)
            for c in piece:
                quoted, escaped = (quoted != (c == '"' and not escaped)), (c == "\\" and not escaped)
        return ids

    def accepts(self, grammar: str, text: str, tokens: list[int] | None = None) -> bool:
        """``text`` as llguidance tokenizes text (added tokens spelled out: llguidance never
        lets an added token stand inside a JSON string), or the given ``tokens``."""
        from llguidance import LLMatcher
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        matcher = LLMatcher(self.ll_tokenizer, LLMatcher.grammar_from_lark(grammar), log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        mask = allocate_token_bitmask(1, self.ll_tokenizer.vocab_size)
        tokens = self.spelled(text) if tokens is None else tokens
        for token in [*tokens, self.tokenizer.eos_token_id]:
            fill_next_token_bitmask(matcher, mask, 0)
            if not (int(mask[0, token // 32]) >> (token % 32)) & 1 or not matcher.consume_token(token):
                return False
        return matcher.is_stopped() and not matcher.is_error()


@pytest.fixture(scope="module", params=["xgrammar", "llguidance"])
def walker(request: pytest.FixtureRequest) -> Walker | GuidanceWalker:
    return Walker() if request.param == "xgrammar" else GuidanceWalker()


def rendered(fmt: str, calls: list[tuple[str, str]]) -> str:
    return render_calls(get_format(fmt), calls)


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_llguidance_takes_qwen_markers_as_the_tokens_the_model_writes(mode: str) -> None:
    """Qwen writes ``<tool_call>`` as one added token (not special in tokenizer.json), which
    xgrammar matches by its text and llguidance only as ``<[id]>``: the translation allows both."""
    walker = GuidanceWalker()
    text = ("Checking.\n" if mode == "auto" else "") + rendered("qwen", GOOD[:2])
    ids = walker.tokenizer.encode(text, add_special_tokens=False)
    assert walker.tokens["<tool_call>"] in ids and walker.tokens["</tool_call>"] in ids
    grammar = walker.compile("qwen", TOOLS, mode)
    assert walker.accepts(grammar, text, ids)
    marker = walker.tokens["</tool_call>"]  # spelled out instead: refused (a narrowing, see the translation)
    at = ids.index(marker)
    spelled = [t for c in "</tool_call>" for t in walker.tokenizer.encode(c, add_special_tokens=False)]
    assert marker not in spelled and not walker.accepts(grammar, text, ids[:at] + spelled + ids[at + 1 :])
    assert not walker.accepts(
        grammar, text.replace("noop", "nop"), walker.tokenizer.encode(text.replace("noop", "nop"))
    )


@pytest.mark.parametrize("injected", [False, True], ids=["json_schema", "json_grammar"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_required_accepts_valid_calls_and_they_parse_back(walker: Walker, fmt: str, injected: bool) -> None:
    grammar = walker.compile(fmt, TOOLS, "required", json_grammar=json_grammar if injected else None)
    text = rendered(fmt, GOOD)
    assert walker.accepts(grammar, text)
    result = parse(fmt, text, [tool.name for tool in TOOLS])
    assert [(c.name, json.loads(c.arguments)) for c in result.calls] == [(n, json.loads(a)) for n, a in GOOD]
    assert result.content == "" and not result.incomplete


@pytest.mark.parametrize("fmt", FORMATS)
def test_required_rejects_wrong_names_bad_arguments_and_free_text(walker: Walker, fmt: str) -> None:
    grammar = walker.compile(fmt, TOOLS, "required", json_grammar=json_grammar)
    assert walker.accepts(grammar, rendered(fmt, [GOOD[0]]))
    for bad in [
        rendered(fmt, [("get_wether", '{"city": "Paris"}')]),
        rendered(fmt, [("get_weather", '{"city": 3}')]),
        rendered(fmt, [("get_weather", "{}")]),
        rendered(fmt, [("get_weather", '{"city": "Paris", "country": "FR"}')]),
        rendered(fmt, [("noop", '{"x": 1}')]),
        "Sure! " + rendered(fmt, [GOOD[0]]),
        rendered(fmt, [GOOD[0]]) + " done",
        "",
    ]:
        assert not walker.accepts(grammar, bad), bad


@pytest.mark.parametrize("mode", ["required", "auto"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_parallel_false_allows_one_call_then_only_eos(walker: Walker, fmt: str, mode: str) -> None:
    grammar = walker.compile(fmt, TOOLS, mode, parallel=False)
    assert walker.accepts(grammar, rendered(fmt, [GOOD[1]]))
    assert not walker.accepts(grammar, rendered(fmt, GOOD[:2]))
    assert walker.accepts(walker.compile(fmt, TOOLS, mode, parallel=True), rendered(fmt, GOOD[:2]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_named_allows_only_that_function(walker: Walker, fmt: str) -> None:
    grammar = walker.compile(fmt, TOOLS, "named", named="get_weather", parallel=False)
    assert walker.accepts(grammar, rendered(fmt, [GOOD[0]]))
    assert not walker.accepts(grammar, rendered(fmt, [GOOD[1]]))
    assert not walker.accepts(grammar, rendered(fmt, [GOOD[0], GOOD[0]]))
    assert not walker.accepts(grammar, "")
    parallel = walker.compile(fmt, TOOLS, "named", named="get_weather")
    assert walker.accepts(parallel, rendered(fmt, [GOOD[0], GOOD[0]]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_accepts_text_and_constrains_calls(walker: Walker, fmt: str) -> None:
    grammar = walker.compile(fmt, TOOLS, "auto")
    call = rendered(fmt, GOOD)
    assert walker.accepts(grammar, "The weather is fine, no tool needed.")
    assert walker.accepts(grammar, call)
    prefix = "" if fmt == "llama3" else "Let me look that up.\n"
    assert walker.accepts(grammar, prefix + call)
    assert parse(fmt, prefix + call).content == prefix.strip()
    assert not walker.accepts(grammar, prefix + rendered(fmt, [("get_wether", '{"city": "P"}')]))
    assert not walker.accepts(grammar, prefix + rendered(fmt, [("get_weather", '{"city": 3}')]))


def test_llama3_auto_text_cannot_contain_an_unconstrained_call(walker: Walker) -> None:
    grammar = walker.compile("llama3", TOOLS, "auto")
    assert not walker.accepts(grammar, 'Sure: {"name": "get_weather", "parameters": {"city": "P"}}')
    assert not walker.accepts(grammar, 'x <|python_tag|>{"name": "get_weather", "parameters": {"city": "P"}}')


@pytest.mark.parametrize("fmt", ["qwen", "mistral"])
def test_argument_whitespace(walker: Walker, fmt: str) -> None:
    compact_sglang = rendered(fmt, [("get_weather", '{"city": "P", "days": 1}')])
    no_spaces = rendered(fmt, [("get_weather", '{"city":"P","days":1}')])
    wide = rendered(fmt, [("get_weather", '{"city":   "P"}')])
    if walker.exact_json:
        exact = walker.compile(fmt, TOOLS, "required", json_grammar=json_grammar)
        assert walker.accepts(exact, compact_sglang)
        assert not walker.accepts(exact, no_spaces) and not walker.accepts(exact, wide)
    bounded = walker.compile(fmt, TOOLS, "required")
    assert walker.accepts(bounded, compact_sglang) and walker.accepts(bounded, no_spaces)
    assert not walker.accepts(bounded, wide)


_PIECES = list('ab "\\\n\t{}[]<>/é😀\u2028') + ["</tool_call>", "[TOOL_CALLS]", "```"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=8).map("".join)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=5,
)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(args=st.dictionaries(_TEXT, _VALUES, max_size=3))
def test_any_arguments_rendered_canonically_are_accepted_and_parse_back(walker: Walker, fmt: str, args: dict) -> None:
    text = rendered(fmt, [("any_args", json.dumps(args, ensure_ascii=False))])
    grammar = walker.compile(fmt, [ANY], "required", json_grammar=json_grammar)
    assert walker.accepts(grammar, text)
    assert parse(fmt, text).calls[0].arguments == json.dumps(args, ensure_ascii=False, separators=(",", ":"))

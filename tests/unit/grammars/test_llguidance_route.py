"""LarkRouter: what goes to llguidance and what stays with xgrammar (translation + llguidance's own
validation, no tokenizer-bound compile), on the tiny Qwen3's tokenizer.json."""

from __future__ import annotations

import json

import pytest

from grammars.compile import LARK_HEADER, LarkRouter
from grammars.tool_calls import ToolSpec, tool_call_constraint

WEATHER = ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


@pytest.fixture(scope="module")
def router() -> LarkRouter:
    from assets import default_cache_dir

    return LarkRouter(default_cache_dir() / "models" / "qwen3-tiny" / "tokenizer.json")


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_a_qwen_tool_grammar_is_routed_with_its_marker_tokens(router, mode):
    lark = router.route("structural_tag", tool_call_constraint("qwen", [WEATHER], mode).value)
    assert lark is not None and lark.startswith(LARK_HEADER)
    assert f"<[{router.tokens['<tool_call>']}]>" in lark  # the marker as the one token Qwen writes


def test_what_llguidance_cannot_take_exactly_stays_with_xgrammar(router):
    pythonic = tool_call_constraint("pythonic", [WEATHER], "required").value  # an EBNF element
    assert router.route("structural_tag", pythonic) is None
    empty = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 2}}, "required": ["n"]}
    assert router.route("json_schema", json.dumps(empty)) is None  # llguidance: unsatisfiable
    assert router.route("json_schema", json.dumps({"type": "object", "not": {}})) is None  # not a routed keyword
    assert router.route("regex", "[a-z]+") is None  # patterns stay with xgrammar


def test_keywords_outside_the_translation_go_to_llguidances_compiler_in_strict_mode(router):
    """``patternProperties`` is not translated: llguidance's own compiler takes the schema with
    strict mode written out (the undeclared, unmatched member is refused); under ``oneOf`` (where
    a narrower branch can widen the whole) it stays with xgrammar."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x_": {"type": "string"}},
    }
    lark = router.route("json_schema", json.dumps(schema))
    assert lark is not None and '"additionalProperties":false' in lark and '"patternProperties"' in lark
    one_of = {"oneOf": [schema, {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    assert router.route("json_schema", json.dumps(one_of)) is None


def test_routes_are_cached(router):
    text = json.dumps({"type": "object", "properties": {"a": {"type": "string", "maxLength": 300}}})
    first = router.route("json_schema", text)
    assert first is not None and router.route("json_schema", text) is first


def test_markers_that_are_special_tokens_are_forced_as_those_tokens(tmp_path):
    """Kimi-K2's markers are special tokens of its tokenizer: llguidance matches a special token
    only as ``<[id]>`` (its bytes are no text), so a marker left as a literal could never be written
    by the model (the engine test of the family stalled that way)."""
    from grammars.compile import structural_tag_to_lark, text_tokens

    kimi = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>")
    added = [{"id": 900 + i, "content": t, "special": True} for i, t in enumerate(kimi)]
    tokens = text_tokens({"added_tokens": added})
    lark = structural_tag_to_lark(tool_call_constraint("kimi_k2", [WEATHER], "required").value, tokens)
    assert all(f"<[{900 + i}]>" in lark for i in range(4)) and not any(t in lark for t in kimi)

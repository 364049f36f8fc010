"""Tool arguments routed to llguidance are enforced as soundly as xgrammar enforces them.

``grammars.compile.llguidance_lark`` sends a tool's ``parameters`` to llguidance only when every
keyword is in ``ROUTED_KEYWORDS``, with xgrammar's strict mode written out
(``strict_schema``). Over the JSON-Schema-Test-Suite (draft2020-12) and the test corpus,
for every schema the service's policy accepts and the translation routes, compiled the way
the translation emits it (a ``%json`` element, bounded whitespace) with SmolLM2's tokenizer:
- no invalid instance of the suite is accepted (soundness, as for xgrammar);
- no instance xgrammar refuses is accepted (the routed grammar never loosens what the
  service served before);
- every instance the policy accepts (valid under the schema as served: strict mode written
  out) or xgrammar accepts is accepted (the routed grammar never narrows it either);
- every valid example of the test corpus is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grammars.compile import (
    NotExpressible,
    compile_text,
    json_schema_to_lark,
    load_compiler,
    strict_schema,
    structural_tag_to_lark,
)
from grammars.errors import GrammarError
from grammars.json_schema import LinearValidator, check_schema
from tools.grammar_check import grammar_text, walk_tokens

DATA = Path(__file__).parent.parent / "data"


def _lark(schema: dict[str, Any]) -> str:
    """The grammar the translation emits for a JSON argument element alone."""
    element = {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 1}
    return structural_tag_to_lark({"type": "structural_tag", "format": element})


class Guidance:
    def __init__(self, tokenizer: Any) -> None:
        from llguidance.hf import from_tokenizer

        self.tokenizer = tokenizer
        self.ll = from_tokenizer(tokenizer, eos_token=tokenizer.eos_token_id)

    def accepts(self, lark: str, text: str) -> bool:
        from llguidance import LLMatcher
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        matcher = LLMatcher(self.ll, LLMatcher.grammar_from_lark(lark), log_level=0)
        mask = allocate_token_bitmask(1, self.ll.vocab_size)
        for token in [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]:
            fill_next_token_bitmask(matcher, mask, 0)
            if not (int(mask[0, token // 32]) >> (token % 32)) & 1 or not matcher.consume_token(token):
                return False
        return matcher.is_stopped() and not matcher.is_error()


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any, Guidance]:
    from assets import model_dir

    tokenizer, compiler = load_compiler(model_dir("smollm2"))
    return tokenizer, compiler, Guidance(tokenizer)


def _routed(schema: Any, build: Any = _lark) -> tuple[dict[str, Any], str] | None:
    """(the schema as the service sends it, its Lark grammar) when the service would route it,
    else None: a ``response_format`` schema as its canonical text (``LarkRouter`` translates
    that), tool arguments as the checked schema (``ToolSpec.parameters``)."""
    from llguidance import LLMatcher

    try:
        checked = check_schema(schema)
        served = json.loads(checked.canonical) if build is json_schema_to_lark else checked.schema
        lark = build(served)
    except (GrammarError, NotExpressible):
        return None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_lark(lark))
    return None if is_error or messages else (served, lark)


def suite_served(route: Callable[[Any], tuple[dict[str, Any], str] | None]) -> Iterator[tuple[str, Any, dict, str]]:
    """(where: file and case, the case, the schema as sent, its Lark grammar) for each
    JSON-Schema-Test-Suite (draft2020-12) case ``route`` sends to llguidance."""
    from assets import schema_suite_dir

    for path in sorted(schema_suite_dir().glob("*.json")):
        for case in json.loads(path.read_text()):
            if (found := route(case["schema"])) is not None:
                yield f"{path.name}: {case['description']}", case, *found


SPACED = (", ", ": ")
"""How llguidance writes a const/enum object or array (xgrammar: compact)."""


@pytest.mark.parametrize("build", [_lark, json_schema_to_lark], ids=["tool_arguments", "response_format"])
def test_suite_instances_llguidance_and_the_policy_agree(smollm2, build):
    """Both directions, over every routed suite schema and instance. ``response_format``: SGLang's
    exact JSON text (", " and ": " only), as xgrammar with ``any_whitespace=False`` emits it;
    tool arguments: bounded whitespace.
    - llguidance accepts: the instance is valid and xgrammar accepts it too;
    - the policy accepts (valid under the schema as served, ``strict_schema``: strict mode written
      out), or xgrammar accepts: llguidance accepts it too."""
    tokenizer, compiler, guidance = smollm2
    routed = promised = 0
    failures: list[str] = []
    for named, case, schema, lark in suite_served(lambda s: _routed(s, build)):
        routed += 1
        try:  # a few schemas xgrammar 0.2.7 cannot compile (test_schema_suite.py): llguidance serves them
            compiled = compile_text(compiler, "json_schema", json.dumps(schema))
        except RuntimeError:
            compiled = None
        served = LinearValidator(strict_schema(schema))
        for test in case["tests"]:
            where = f"{named}: {test['description']}"
            text = grammar_text(test["data"], schema, const_separators=SPACED)
            by_llguidance = guidance.accepts(lark, text)
            xgrammar_text = grammar_text(test["data"], schema)
            by_xgrammar = compiled is not None and walk_tokens(compiled, tokenizer, xgrammar_text).accepted
            by_policy = test["valid"] and served.is_valid(test["data"])
            promised += by_policy
            if by_llguidance and not test["valid"]:
                failures.append(f"unsound: {where}")
            elif by_llguidance and compiled is not None and not by_xgrammar:
                failures.append(f"looser than xgrammar: {where}: {text}")
            elif not by_llguidance and (by_policy or by_xgrammar):
                failures.append(f"refuses what the {'policy' if by_policy else 'xgrammar'} accepts: {where}: {text}")
    assert routed >= 40, routed  # the comparison covers a real share of the suite
    assert promised >= 100, promised  # and of its valid instances
    assert not failures, failures


@pytest.mark.parametrize("build", [_lark, json_schema_to_lark], ids=["tool_arguments", "response_format"])
def test_corpus_examples_are_accepted_when_routed(smollm2, build):
    _, _, guidance = smollm2
    routed = 0
    for entry in json.loads((DATA / "json_schemas.json").read_text()):
        found = _routed(entry["schema"], build)
        if found is None:
            continue
        routed += 1
        schema, lark = found
        example = entry["valid_example"]
        assert guidance.accepts(lark, grammar_text(example, schema)), (entry["name"], example)
    assert routed >= 10, routed


def test_formats_llguidance_accepts_no_invalid_string_xgrammar_refuses(smollm2):
    """``format`` is routed: over the suite's optional/format files, every invalid string the
    llguidance grammar accepts, xgrammar (what the service served before) accepts as well.
    Neither is fully sound on dates and times (e.g. both take some out-of-range times)."""
    from assets import schema_suite_dir
    from grammars.json_schema.keywords import SGLANG_FORMATS

    tokenizer, compiler, guidance = smollm2
    checked, worse = 0, []
    for fmt in sorted(SGLANG_FORMATS):
        path = schema_suite_dir() / "optional" / "format" / f"{fmt}.json"
        if not path.exists():
            continue
        schema = {"type": "string", "format": fmt}
        lark, compiled = _lark(schema), compile_text(compiler, "json_schema", json.dumps(schema))
        for case in json.loads(path.read_text()):
            for test in case["tests"]:
                if test["valid"] or not isinstance(test["data"], str):
                    continue
                checked += 1
                text = json.dumps(test["data"])
                if guidance.accepts(lark, text) and not walk_tokens(compiled, tokenizer, text).accepted:
                    worse.append(f"{fmt}: {text}")
    assert checked >= 100, checked
    assert not worse, worse


def _patterns() -> list[str]:
    from grammars.json_schema import iter_subschemas

    schemas = [t["function"].get("parameters") or {} for t in json.loads((DATA / "tools.json").read_text())]
    schemas += [e["schema"] for e in json.loads((DATA / "json_schemas.json").read_text())]
    found = {
        n.value["pattern"]
        for s in schemas
        for n in iter_subschemas(s)
        if isinstance(n.value, dict) and "pattern" in n.value
    }
    return sorted(found)


def test_patterns_match_the_whole_string_as_xgrammar_does(smollm2):
    """llguidance follows JSON Schema (a pattern may match anywhere); the translation anchors
    it, so the routed grammar takes exactly the strings the whole pattern matches (oracle:
    Python's ``re.fullmatch``, ASCII classes), over every pattern of the tool and schema
    corpora and candidates that match, sit inside a longer string, or fall short."""
    import re

    _, _, guidance = smollm2
    anchored = _patterns()
    assert len(anchored) >= 5, anchored
    patterns = anchored + [p.removeprefix("^").removesuffix("$") for p in anchored]  # and without anchors
    probes = ["AB", "ABC", "ABCD", "xABC", "ab", "abc", "12:30", "24:00", "2024-05", "2024-13", "1234", "12345",
              "PROJ1", "P", "A1B2C3D4E5F", "", "ABC\n"]  # fmt: skip
    wrong = []
    for pattern in patterns:
        lark = _lark({"type": "object", "properties": {"v": {"type": "string", "pattern": pattern}}, "required": ["v"]})
        for probe in probes:
            expected = re.fullmatch(pattern.removeprefix("^").removesuffix("$"), probe, re.ASCII) is not None
            if guidance.accepts(lark, json.dumps({"v": probe})) != expected:
                wrong.append((pattern, probe, expected))
    assert not wrong, wrong


def test_response_format_json_has_sglangs_exact_whitespace(smollm2):
    _, _, guidance = smollm2
    lark = json_schema_to_lark({"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]})
    assert guidance.accepts(lark, '{"a": [1, 2]}')
    for other in ('{"a":[1,2]}', '{ "a": [1, 2]}', '{"a": [1,  2]}', '{"a": [1, 2]}\n', '{"a": [1, 2], "b": 1}'):
        assert not guidance.accepts(lark, other), other

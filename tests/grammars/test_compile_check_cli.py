"""``structserve grammar check`` (tools/grammar_check.py): real in-process compile with the
tiny Qwen3 tokenizer and token-by-token walks; plus the instance serializer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grammars.json_schema import check_schema
from tools.grammar_check import grammar_app, grammar_text, walk_tokens

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "maximum": 150},
        "role": {"enum": ["admin", {"custom": [1, 2]}]},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
GOOD = {"age": 41.0, "tags": ["x", "é\n"], "role": {"custom": [1, 2]}, "name": 'Ann "A"'}


@pytest.fixture(scope="module")
def qwen3_dir() -> Path:
    from assets import model_dir

    return model_dir("qwen3-tiny")


def _files(tmp_path: Path, **docs: Any) -> dict[str, str]:
    paths = {}
    for name, doc in docs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
        paths[name] = str(tmp_path / f"{name}.json")
    return paths


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(grammar_app, ["check", *args])
    return result.exit_code, result.output


def test_grammar_text_matches_what_xgrammar_emits() -> None:
    schema = json.loads(check_schema({k: v for k, v in SCHEMA.items()}, allow_loosening=True).canonical)
    assert grammar_text(GOOD, schema) == (
        '{"name": "Ann \\"A\\"", "age": 41, "role": {"custom":[1,2]}, "tags": ["x", "é\\n"]}'
    )
    assert grammar_text({"n": 0.1, "e": 2.0}, {"properties": {"e": {"enum": [2]}}}) == ('{"e": 2, "n": 0.1}')
    assert (
        grammar_text([1, "a"], {"anyOf": [{"type": "array", "prefixItems": [{"type": "integer"}, {"const": "a"}]}]})
        == '[1, "a"]'
    )


def test_check_accepts_a_valid_instance(tmp_path: Path, qwen3_dir: Path) -> None:
    files = _files(tmp_path, schema=SCHEMA, good=GOOD)
    code, out = _run(files["schema"], "-i", files["good"], "--tokenizer", str(qwen3_dir), "--allow-loosening")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == ("loosened: `uniqueItems` at /properties/tags: ignored by xgrammar; remove it")
    assert lines[1].startswith("compiled in ") and "vocab 151" in lines[1]
    assert lines[2].startswith(f"{files['good']}: accepted (") and "schema-valid: yes" in lines[2]


def test_check_rejects_an_invalid_instance(tmp_path: Path, qwen3_dir: Path) -> None:
    bad = dict(GOOD, age=151)
    files = _files(
        tmp_path,
        schema={**SCHEMA, "properties": {k: v for k, v in SCHEMA["properties"].items() if k != "tags"}},
        good=GOOD,
        bad=bad,
    )
    code, out = _run(files["schema"], "-i", files["bad"], "-i", files["good"], "--tokenizer", str(qwen3_dir))
    assert code == 1
    bad_line, good_line = out.splitlines()[1:3]
    assert bad_line.startswith(f"{files['bad']}: REJECTED (token ")
    assert "schema-valid: no" in bad_line
    assert good_line.startswith(f"{files['good']}: REJECTED (")  # tags is not declared now


def test_check_reports_unsupported_keywords(tmp_path: Path) -> None:
    files = _files(tmp_path, schema=SCHEMA)
    code, out = _run(files["schema"])
    assert code == 1
    assert out.splitlines()[0].startswith("unsupported_schema_keyword: the schema uses 1 ")
    assert out.splitlines()[1] == ("  unsupported `uniqueItems` at /properties/tags: ignored by xgrammar; remove it")


def test_check_reports_compile_errors(tmp_path: Path, qwen3_dir: Path) -> None:
    files = _files(tmp_path, schema={"type": "string", "pattern": "^(a|b$"})
    code, out = _run(files["schema"], "--tokenizer", str(qwen3_dir))
    assert (code, out.strip()) == (
        1,
        "grammar_compile_failed: Regex parsing error at position 7: The parenthesis is not closed.",
    )


def test_check_unreadable_input(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("{nope", encoding="utf-8")
    code, out = _run(str(tmp_path / "s.json"))
    assert code == 2 and "cannot read JSON" in out


def test_walk_tokens_pinpoints_the_refusal(qwen3_dir: Path) -> None:
    from grammars.compile import compile_text, load_compiler

    tok, compiler = load_compiler(qwen3_dir)
    compiled = compile_text(
        compiler,
        "json_schema",
        check_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}).canonical,
    )
    ok = walk_tokens(compiled, tok, '{"a": 12}')
    assert ok.accepted and ok.failed_at is None and ok.tokens == len(tok.encode('{"a": 12}'))
    early = walk_tokens(compiled, tok, '{"a": 1x}')
    assert not early.accepted and early.failed_at is not None and early.failed_at < early.tokens
    short = walk_tokens(compiled, tok, '{"a": 1')
    assert (short.accepted, short.failed_at) == (False, short.tokens)
    assert "does not allow stopping" in short.detail

"""The ahead-of-engine compile refuses a grammar that allows no first token (real
xgrammar in the worker, the tiny Qwen3 tokenizer): the backstop behind the policy for
the class SGLang would otherwise abort on its first token with a 500."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from grammars.errors import UnsatisfiableSchemaError
from service.types.plan import DecodeConstraint

LOOP = json.dumps(
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
)  # raw text: the policy would stop it first
PARAM = "response_format.json_schema.schema"


@pytest.fixture(scope="module")
def qwen3_dir() -> Path:
    from assets import model_dir

    return model_dir("qwen3-tiny")


def test_no_first_token_is_a_400_naming_the_field(qwen3_dir: Path) -> None:
    from service.grammar_check import GrammarService
    from service.startup import ModelInfo

    service = GrammarService(qwen3_dir, ModelInfo.read(qwen3_dir).vocab, timeout_s=60.0, cache_size=8)
    try:
        for _ in range(2):  # a deterministic failure: the second answer comes from the cache
            with pytest.raises(UnsatisfiableSchemaError) as info:
                asyncio.run(service.ensure_compiles(DecodeConstraint("json_schema", LOOP, param=PARAM)))
            assert (info.value.code, info.value.param) == ("unsatisfiable_schema", PARAM)
            assert "allows no first token" in info.value.message
        ok = json.dumps(
            {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"}
        )  # the same loop with a way out compiles
        asyncio.run(service.ensure_compiles(DecodeConstraint("json_schema", ok, param=PARAM)))
    finally:
        service.close()

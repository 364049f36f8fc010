"""The model-family registry: every format lookup by ``model_type`` reads ``MODEL_FAMILIES``."""

from __future__ import annotations

import pytest

from runtime_ext.formats import (
    MODEL_FAMILIES,
    ModelFamily,
    get_format,
    select_format,
    select_reasoning_format,
)
from runtime_ext.formats.families import by_model_type

CASES = [pytest.param(family, t, id=t) for family in MODEL_FAMILIES for t in family.model_types]


@pytest.mark.parametrize("family, model_type", CASES)
def test_auto_selection_reads_the_family_record(family: ModelFamily, model_type: str) -> None:
    assert select_format("auto", model_type, template_renders_tools=True) is family.tool_format
    assert select_format("auto", model_type, template_renders_tools=False) is get_format("generic")
    assert select_reasoning_format("auto", model_type) is family.reasoning


def test_a_model_type_belongs_to_one_family() -> None:
    qwen = get_format("qwen")
    with pytest.raises(ValueError, match="'qwen3' is in two families"):
        by_model_type([ModelFamily("a", ("qwen3",), qwen), ModelFamily("b", ("x", "qwen3"), qwen)])

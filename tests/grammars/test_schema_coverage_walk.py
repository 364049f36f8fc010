"""bench/schema_coverage.py counts an invalid MaskBench instance as accepted only when the text the
served grammar takes is itself invalid: an integral float under ``integer`` is written as the
grammar writes it (``12345``), which a draft-04 schema counts as an integer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from schema_coverage_libs import Libraries  # noqa: E402

from assets import model_dir  # noqa: E402

DRAFT4_INTEGER = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "properties": {"id": {"type": "integer"}},
}
UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}  # validated, not enforced


@pytest.fixture(scope="module")
def libs() -> Libraries:
    return Libraries(model_dir("smollm2"))


def test_an_integral_float_written_as_the_grammar_writes_it_is_not_an_invalid_acceptance(libs):
    served = libs.build("structserve", DRAFT4_INTEGER)
    assert libs.accepted_text(served, {"id": 12345.0}) == '{"id": 12345}'
    assert not libs.accepts_invalid(served, DRAFT4_INTEGER, {"id": 12345.0})
    assert not libs.accepts(served, {"id": 12345.5})


def test_an_invalid_text_the_grammar_takes_is_counted(libs):
    served = libs.build("structserve", UNIQUE)
    assert "validate" in served.route, served.route
    assert libs.accepts_invalid(served, UNIQUE, [1, 1])


DRAFT7_TUPLE = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "array",
    "items": [{"type": "string"}, {"type": "integer"}],
    "additionalItems": False,
}


@pytest.mark.parametrize("library", ["structserve", "structserve-strict"])
def test_a_draft07_tuple_is_served_as_its_draft_means(libs, library):
    """Through llguidance's real matcher: the restated schema names 2020-12 (llguidance reads a
    draft-07 ``$schema`` as draft 7, where ``prefixItems`` means nothing and every element is refused)."""
    served = libs.build(library, DRAFT7_TUPLE)
    assert [libs.accepts(served, v) for v in (["a", 1], ["a"], ["a", "b"], ["a", 1, 2])] == [True, True, False, False]

"""The streaming JSON canonicalizer: any spelling, any chunking -> compact json.dumps text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolcall_corpus import compact, json_values, strings

from runtime_ext.parsers.core import Malformed
from runtime_ext.parsers.jsonscan import JsonCanonicalizer

objects = st.dictionaries(strings, json_values(strings), max_size=5)


def canonical(raw: str, cuts: list[int]) -> tuple[str, int]:
    canon, out, used = JsonCanonicalizer(), [], 0
    bounds = [0, *sorted(cuts), len(raw)]
    for a, b in zip(bounds, bounds[1:]):
        if canon.done:
            break
        piece, consumed = canon.push(raw[a:b])
        out.append(piece)
        used += consumed
    assert canon.done
    return "".join(out), used


@settings(max_examples=300, deadline=None)
@given(obj=objects, ascii_=st.booleans(), indent=st.sampled_from([None, 0, 2]), data=st.data())
def test_any_spelling_and_chunking_gives_compact_dumps(obj, ascii_, indent, data) -> None:
    raw = json.dumps(obj, ensure_ascii=ascii_, indent=indent)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
    text, used = canonical(raw + " trailing", cuts)
    assert text == compact(obj) and used == len(raw)


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": tru}',
        '{"a": 01}',
        '{"a": NaN}',
        '{"a": "\x01"}',
        '{"a" 1}',
        '{"a": "\\q"}',
        '{"a": "\\u12G4"}',
        "{,}",
        '{"a": 1 x}',
    ],
)
def test_invalid_json_is_malformed(raw: str) -> None:
    with pytest.raises(Malformed):
        JsonCanonicalizer().push(raw)


def test_unpaired_surrogates_stay_escaped_and_pairs_are_joined() -> None:
    assert canonical('{"a": "\\ud83d\\ude00\\ud800x\\udc00"}', [])[0] == '{"a":"😀\\ud800x\\udc00"}'

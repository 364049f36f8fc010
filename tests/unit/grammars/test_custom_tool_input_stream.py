"""InputStream: a custom call's input decoded from argument fragments cut anywhere."""

from __future__ import annotations

import json
import random

import pytest

from grammars.lark import InputStream

TEXTS = ["plain", 'a "quoted" \\ path\n\ttab \u0001 é 東', ""]


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")], ids=["model", "compact"])
@pytest.mark.parametrize("text", TEXTS)
def test_fragments_cut_anywhere_decode_to_the_input(text, separators):
    raw = json.dumps({"input": text}, ensure_ascii=False, separators=separators)
    rng = random.Random(0)
    for _ in range(100):
        cuts = sorted(rng.sample(range(len(raw) + 1), min(4, len(raw) + 1)))
        fragments = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
        stream = InputStream()
        assert "".join(stream.feed(f) for f in fragments) == text


def test_a_split_escape_is_held_back():
    stream = InputStream()
    assert stream.feed('{"input": "a\\') == "a"
    assert stream.feed("u00e9") == "é"
    assert stream.feed('b"}') == "b"

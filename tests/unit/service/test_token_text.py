"""Token bytes and strings for ``logprobs`` (OpenAI's ``bytes`` and ``bytes:\\x..`` notation)."""

from __future__ import annotations

from service.pipeline.openai_objects import legacy_logprobs
from service.token_text import TokenTexts, piece_bytes, token_string
from service.types.results import TokenLogprob


def test_byte_level_pieces_map_back_to_their_bytes():
    assert piece_bytes("Ġhello", special=False) == b" hello"
    assert piece_bytes("Ċ", special=False) == b"\n"
    assert piece_bytes("<|im_end|>", special=True) == b"<|im_end|>"
    assert piece_bytes("<0xE2>", special=False) == b"\xe2"
    assert piece_bytes("▁day", special=False) == " day".encode()


def test_a_partial_character_is_shown_as_bytes():
    assert token_string("é".encode()) == "é"
    assert token_string("€".encode()[:2]) == "bytes:\\xe2\\x82"


def test_masked_alternatives_are_not_listed():
    class Tok:
        all_special_ids: list[int] = []

        def convert_ids_to_tokens(self, i):
            return "ab"[i]

    lp = TokenTexts(Tok()).logprobs([(-0.1, 0, None)], [[(-0.1, 0, None), (float("-inf"), 1, None)]])
    assert lp == (TokenLogprob("a", (97,), -0.1, (("a", (97,), -0.1),)),)


def test_legacy_logprobs_offsets_and_the_first_prompt_token():
    tokens = (
        TokenLogprob("Hi", (72, 105), None),
        TokenLogprob(" there", tuple(b" there"), -1.5, ((" there", tuple(b" there"), -1.5), ("!", (33,), -2.0))),
    )
    out = legacy_logprobs(tokens)
    assert out.tokens == ["Hi", " there"] and out.token_logprobs == [None, -1.5]
    assert out.top_logprobs == [None, {" there": -1.5, "!": -2.0}] and out.text_offset == [0, 2]

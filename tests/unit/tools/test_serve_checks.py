"""The checks of the serving benches: equal prompt-token sums, the identical-completion share,
the median and spread over rounds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from serve_checks import PromptTokensDiffer, Spread, check_prompt_tokens, identical_share, spread  # noqa: E402


def test_equal_prompt_token_sums_pass() -> None:
    check_prompt_tokens({"SGLang": 1234, "structserve": 1234, "HF generate": 1234})


def test_unequal_prompt_token_sums_raise_naming_both_sums() -> None:
    with pytest.raises(PromptTokensDiffer) as err:
        check_prompt_tokens({"SGLang": 1234, "structserve": 1234, "structserve C8-D": 1250})
    message = str(err.value)
    assert "SGLang 1234" in message
    assert "structserve C8-D 1250" in message
    assert "structserve 1234" not in message.split(" vs ")[1]


def test_a_difference_against_the_first_server_is_caught_whatever_its_position() -> None:
    with pytest.raises(PromptTokensDiffer, match="SGLang 1000 vs structserve 1001"):
        check_prompt_tokens({"SGLang": 1000, "structserve": 1001})


def test_no_sums_is_not_a_pass() -> None:
    with pytest.raises(PromptTokensDiffer, match="no server"):
        check_prompt_tokens({})


def test_identical_share_compares_text_exactly_by_position() -> None:
    reference = ["It was a fine day.", "She smiled.", "Anne rose.", "No."]
    texts = ["It was a fine day.", "She smiled. ", "Anne rose.", "no."]
    assert identical_share(texts, reference) == 0.5
    assert identical_share(reference, reference) == 1.0
    assert identical_share(list(reversed(reference)), reference) == 0.0


def test_identical_share_refuses_unmatched_lengths_and_empty_input() -> None:
    with pytest.raises(ValueError, match="3 completions against 2"):
        identical_share(["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match="no completions"):
        identical_share([], [])


def test_spread_is_the_median_with_min_and_max() -> None:
    assert spread([180.0, 150.0, 210.0]) == Spread(180.0, 150.0, 210.0)
    assert spread([1.0, 4.0, 2.0, 3.0]) == Spread(2.5, 1.0, 4.0)
    assert str(spread([293.7, 280.05, 301.0])) == "293.7 (280.1–301.0)"


def test_spread_ratio_is_of_medians_and_no_rounds_raise() -> None:
    assert spread([2.0, 9.0, 4.0]).ratio(spread([1.0, 2.0, 100.0])) == 2.0
    with pytest.raises(ValueError, match="no rounds"):
        spread([])

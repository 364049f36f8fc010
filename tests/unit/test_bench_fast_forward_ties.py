"""The fast-forward bench's account of differing outputs (pure)."""

from __future__ import annotations

from bench.fast_forward_ties import describe, first_difference, partings


def test_first_difference_counts_a_length_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 5, 3], [1, 2, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_partings_give_step_by_steps_margin_at_the_first_difference():
    fast, step = [[1, 2, 9], [4, 5]], [[1, 2, 3], [4, 5]]
    top2 = [[[-0.1, -3.0], [-0.2, -2.0], [-0.70, -0.72]], [[-0.1, -1.0], [-0.1, -1.0]]]
    (only,) = partings(fast, step, top2)
    assert (only.request, only.at, only.length) == (0, 2, 3) and abs(only.margin - 0.02) < 1e-9
    assert "parts at token 2 of 3" in describe("json", 8, [only])[0]

"""The batches bench/decode_attention.py decodes: one shared window, or one window per request."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from decode_attention import batch_windows  # noqa: E402

WINDOWS = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]


def test_shared_layout_repeats_the_first_window() -> None:
    assert batch_windows(WINDOWS, 3, "shared") == [[1, 2, 3]] * 3


def test_distinct_layout_gives_every_request_its_own_window() -> None:
    batch = batch_windows(WINDOWS, 3, "distinct")
    assert batch == WINDOWS[:3]
    assert len({tuple(w) for w in batch}) == 3


def test_distinct_layout_refuses_a_batch_larger_than_the_windows() -> None:
    with pytest.raises(ValueError, match="4 distinct windows for a batch of 5"):
        batch_windows(WINDOWS, 5, "distinct")

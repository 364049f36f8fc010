"""The pure scoring of bench/kv_fidelity.py: the coarsened KL and the agreement counts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from kv_fidelity_data import instructions, kl_coarse, score, short_prompts  # noqa: E402


def logs(probs: dict[int, float]) -> dict[int, float]:
    return {t: math.log(p) for t, p in probs.items()}


def test_coarse_kl_is_zero_for_equal_rows_and_below_the_full_kl():
    p = {1: 0.6, 2: 0.3, 3: 0.05, 4: 0.05}
    q = {1: 0.5, 2: 0.3, 3: 0.15, 4: 0.05}
    full = sum(p[t] * math.log(p[t] / q[t]) for t in p)
    top2 = {t: p[t] for t in (1, 2)}  # tokens 3 and 4 fall into the rest bucket
    assert kl_coarse(logs(p), logs(p)) == pytest.approx(0, abs=1e-12)
    coarse = kl_coarse(logs(top2), logs(q))
    expected = 0.6 * math.log(0.6 / 0.5) + 0.3 * math.log(1) + 0.1 * math.log(0.1 / 0.2)
    assert coarse == pytest.approx(expected) and 0 < coarse <= full


def test_score_counts_exact_answers_and_top1_agreement():
    ref = {"short": [[1, 2], [3]], "rows": [[logs({5: 0.9, 6: 0.1}), logs({7: 0.6, 8: 0.4})]], "lps": [-1.0, -1.0]}
    res = {"short": [[1, 2], [4]], "rows": [[logs({5: 0.8, 6: 0.2}), logs({7: 0.3, 8: 0.7})]], "lps": [-1.0, -2.0]}
    s = score(ref, res, top=2)
    assert s["exact"] == 0.5 and s["agree"] == 0.5 and s["per_position"] == [[True, False]]
    assert s["kl"] > 0 and s["dppl"] == pytest.approx(math.exp(1.5) / math.e - 1)


def test_prompt_sets():
    text = " ".join(f"Sentence number {i} is long enough to be used as an instruction here." for i in range(300))
    made = instructions(text, 240)
    assert len(made) == len(set(made)) == 240
    with pytest.raises(ValueError, match="usable sentences"):
        instructions(text, 301)
    assert short_prompts()[0] == "What is the capital of France?" and len(short_prompts()) >= 100

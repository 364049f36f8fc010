"""fixes/min_p_seed.py: SGLang's torch sampler with min_p and a seed tensor (the batch every
structserve scheduler builds) asserts; the hook samples with SGLang's own min-p rule instead."""

from __future__ import annotations

import pytest
import torch
from sglang.srt.layers import sampler

from runtime_ext.fixes.min_p_seed import apply_min_p, sample_with_min_p

ORIGINAL = sampler.top_k_top_p_min_p_sampling_from_probs_torch


def batch(rows=6, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(rows, vocab, generator=g) * 3, dim=-1)
    top_ks = torch.tensor([vocab, 5, vocab, 3, vocab, vocab])[:rows]
    top_ps = torch.tensor([1.0, 1.0, 0.9, 0.8, 1.0, 0.95])[:rows]
    min_ps = torch.tensor([0.0, 0.1, 0.2, 0.0, 0.5, 0.05])[:rows]
    return probs, top_ks, top_ps, min_ps


def test_sglang_asserts_with_min_p_and_a_seed():
    probs, top_ks, top_ps, min_ps = batch()
    seeds, positions = torch.arange(6, dtype=torch.int64), torch.zeros(6, dtype=torch.int64)
    with pytest.raises(AssertionError, match="sampling seed"):
        ORIGINAL(probs, top_ks, top_ps, min_ps, True, seeds, positions)


def test_without_a_seed_the_hook_samples_exactly_as_sglang():
    probs, top_ks, top_ps, min_ps = batch()
    positions = torch.zeros(6, dtype=torch.int64)
    for trial in range(20):
        torch.manual_seed(trial)
        expected = ORIGINAL(probs, top_ks, top_ps, min_ps, True, None, positions)
        torch.manual_seed(trial)
        got = sample_with_min_p(ORIGINAL, probs, top_ks, top_ps, min_ps, True, None, positions)
        assert torch.equal(got, expected)


def test_with_a_seed_only_tokens_min_p_keeps_are_sampled():
    probs, top_ks, top_ps, min_ps = batch()
    positions = torch.zeros(6, dtype=torch.int64)
    kept = apply_min_p(probs, min_ps) > 0
    for s in range(50):
        seeds = torch.full((6,), s, dtype=torch.int64)
        ids = sample_with_min_p(ORIGINAL, probs, top_ks, top_ps, min_ps, True, seeds, positions)
        assert kept[torch.arange(6), ids.long()].all()
    assert (~kept[4]).sum() > 0  # min_p 0.5 really removes tokens of that row

"""Gap: SGLang 0.5.23's torch sampler (``top_k_top_p_min_p_sampling_from_probs_torch``, the
CPU path) asserts ``sampling_seed is None`` when any request of the batch uses ``min_p``.
``fixes/sampling_seed.py`` gives every batch a seed tensor, so one request with ``min_p``
would kill the scheduler (measured: the assertion, then SIGQUIT), taking every request down.

The assertion guards a TODO ("probs_sort should be re-normalized for multinomial_with_seed"),
but the seeded sampler is Gumbel-max over ``log(probs)``: adding a constant to every weight
of a row does not change its argmax, so no renormalisation is needed.

Fix (AROUND hook): zero the probabilities below ``min_p × max`` of each row first, then call
SGLang's sampler with ``need_min_p_sampling=False``. That is SGLang's own min-p rule: the
tokens it removes are the smallest of the row, so top-k ranks and the top-p prefix sums of
the tokens that stay are unchanged, and SGLang applies min-p after top-k/top-p on the same
sorted row.
"""

from __future__ import annotations

from typing import Any

TARGET = "sglang.srt.layers.sampler.top_k_top_p_min_p_sampling_from_probs_torch"


def apply_min_p(probs: Any, min_ps: Any) -> Any:
    """``probs`` with each row's entries below ``min_p × row max`` set to zero (a copy)."""
    threshold = probs.max(dim=-1, keepdim=True).values * min_ps.view(-1, 1).to(probs.dtype)
    return probs.masked_fill(probs < threshold, 0.0)


def sample_with_min_p(
    original: Any, probs: Any, top_ks: Any, top_ps: Any, min_ps: Any, need_min_p: bool, *args: Any, **kwargs: Any
) -> Any:
    if need_min_p:
        probs = apply_min_p(probs, min_ps)
    return original(probs, top_ks, top_ps, min_ps, False, *args, **kwargs)


def register(hooks: Any, hook_type: Any) -> None:
    hooks.register(TARGET, sample_with_min_p, hook_type.AROUND)

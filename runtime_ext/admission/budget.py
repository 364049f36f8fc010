"""Budget admission: a request's worst-case KV pages are reserved before it runs
(pure logic: no torch, no sglang).

A request of P prompt tokens that may generate M tokens holds at most
``ceil((P + M + 1) / page)`` pages over its life (``worst_tokens``; the +1: with overlap
scheduling a decode step is allocated before the previous step's finish is seen). At any moment
it holds ``ceil(held / page)`` of them (``held``: the KV tokens it has, its matched prefix
included), so it may still allocate ``outstanding = worst pages - held pages``. A request that
matched a prefix in the prefix cache counts those pages as held: reused, not reserved again (a
prompt shared by ``n`` choices is counted once when the choices match it).

Admission (``PassBudget``): a waiting request is admitted only if the outstanding pages of every
running request, of those admitted earlier in the pass (and of a chunked prefill in progress),
plus its own fit in the pages that are free or held only by the prefix cache's evictable
nodes. Each decode page then comes out of that margin: decode never runs short, so the engine
never retracts. What a request did not use is released when it leaves the running batch
(finished or aborted): its outstanding pages simply stop being counted.

``reserve_ratio`` < 1 (``scheduling.reserve_ratio``) reserves only that share of ``max_new``: a
bet that requests stop early, measured in ``bench/admission.py``. It gives up the guarantee:
a request that outgrows its reservation can make the pool run short, and SGLang then retracts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

OVERLAP_SLACK_TOKENS = 1  # one decode step allocated before the previous step's finish is seen


def pages(tokens: int, page_size: int) -> int:
    return -(-max(tokens, 0) // page_size)


@dataclass(frozen=True)
class Sequence:
    """One request as the budget sees it (tokens)."""

    prompt_tokens: int
    max_new_tokens: int
    held_tokens: int  # KV tokens it holds now (its matched prefix included)
    reserve_ratio: float = 1.0  # < 1: reserve only this share of max_new (no longer a guarantee)

    @property
    def worst_tokens(self) -> int:
        return self.prompt_tokens + math.ceil(self.max_new_tokens * self.reserve_ratio) + OVERLAP_SLACK_TOKENS

    def worst_pages(self, page_size: int) -> int:
        return pages(self.worst_tokens, page_size)

    def held_pages(self, page_size: int) -> int:
        return pages(self.held_tokens, page_size)

    def outstanding_pages(self, page_size: int) -> int:
        return max(self.worst_pages(page_size) - self.held_pages(page_size), 0)


def sequence(req: Any, held_tokens: int, ratio: float = 1.0) -> Sequence:
    """A scheduler request (SGLang's ``Req``, read by its fields: nothing is imported) as the budget sees it."""
    return Sequence(len(req.origin_input_ids), int(req.sampling_params.max_new_tokens), int(held_tokens), ratio)


def running_sequence(req: Any, ratio: float = 1.0) -> Sequence:
    """A running request: it holds the KV allocated for it."""
    return sequence(req, req.kv.kv_allocated_len, ratio)


@dataclass
class PassBudget:
    """One admission pass: ``available_pages`` free + evictable (after the candidate's prefix
    lock), ``committed`` the outstanding pages already promised."""

    page_size: int
    committed: int = 0

    def commit(self, seq: Sequence) -> None:
        """A request that runs: running, admitted in this pass, or a chunked prefill."""
        self.committed += seq.outstanding_pages(self.page_size)

    def fits(self, seq: Sequence, available_pages: int) -> bool:
        """Whether ``seq`` may be admitted (then ``commit`` it)."""
        return self.committed + seq.outstanding_pages(self.page_size) <= available_pages


def largest_max_new(prompt_tokens: int, pool_tokens: int, page_size: int) -> int:
    """The most tokens a request of ``prompt_tokens`` can generate in this pool (alone in it).

    SGLang 0.5.23 silently clips ``max_new_tokens`` to ``pool - paged(prompt) - page - 1``
    (``Scheduler`` -> ``BaseTokenToKVPoolAllocator.max_new_tokens_for_memory``); the budget
    needs its worst pages to fit the pool. The front refuses anything larger with a 400, so a
    client's ``max_tokens`` is never shortened behind its back."""
    sglang_rule = pool_tokens - pages(prompt_tokens, page_size) * page_size - page_size - 1
    budget_rule = (pool_tokens // page_size) * page_size - prompt_tokens - OVERLAP_SLACK_TOKENS
    return max(min(sglang_rule, budget_rule), 0)


def usage(seqs: list[Sequence], page_size: int) -> dict[str, int]:
    """Reserved (worst-case) vs used pages of the running requests."""
    return {
        "reserved_pages": sum(s.worst_pages(page_size) for s in seqs),
        "used_pages": sum(s.held_pages(page_size) for s in seqs),
        "outstanding_pages": sum(s.outstanding_pages(page_size) for s in seqs),
    }

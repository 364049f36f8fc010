"""The budget's reservation arithmetic against a simple model of a paged KV pool: free pages,
pages of the prefix cache (evictable, or locked by the request that reuses them), and pages
requests hold. Admission goes through ``PassBudget`` exactly as the SGLang adder calls it;
prefill is chunked; requests finish early or are aborted. Property: the outstanding
reservations never exceed free + evictable pages, so no decode step or prefill chunk ever
finds the pool short (the engine never has to retract)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_ext.admission.budget import OVERLAP_SLACK_TOKENS, PassBudget, Sequence, largest_max_new, pages, usage

PAGE = 4


def test_pages_round_up_and_reuse_is_not_reserved_again():
    assert [pages(t, PAGE) for t in (0, 1, 4, 5)] == [0, 1, 1, 2]
    fresh = Sequence(prompt_tokens=10, max_new_tokens=5, held_tokens=0)
    assert fresh.worst_tokens == 16 and fresh.outstanding_pages(PAGE) == 4
    reused = Sequence(prompt_tokens=10, max_new_tokens=5, held_tokens=8)  # two cached pages
    assert reused.outstanding_pages(PAGE) == 2


def test_n_choices_that_match_the_cached_prompt_count_it_once():
    """The n choices of one prompt, admitted after the prompt is in the cache: each reserves
    its own tail only; the shared pages are held once in the pool."""
    prompt, max_new, n = 40, 10, 4
    choices = [Sequence(prompt, max_new, held_tokens=40) for _ in range(n)]
    budget = PassBudget(PAGE)
    for seq in choices:
        budget.commit(seq)
    assert budget.committed == n * (pages(prompt + max_new + OVERLAP_SLACK_TOKENS, PAGE) - pages(prompt, PAGE))


def test_pass_budget_admits_up_to_the_available_pages_exactly():
    budget = PassBudget(PAGE)
    budget.commit(Sequence(8, 7, held_tokens=4))  # running: 4 pages worst, 1 held -> 3 outstanding
    seq = Sequence(4, 3, held_tokens=0)  # 2 pages
    assert budget.fits(seq, available_pages=5) and not budget.fits(seq, available_pages=4)


def test_release_on_finish_is_the_outstanding_of_the_request_that_left():
    running = [Sequence(8, 40, held_tokens=9), Sequence(8, 40, held_tokens=20)]
    before, after = usage(running, PAGE), usage(running[1:], PAGE)
    assert before["outstanding_pages"] - after["outstanding_pages"] == running[0].outstanding_pages(PAGE)
    assert before["reserved_pages"] == sum(s.worst_pages(PAGE) for s in running)
    assert before["used_pages"] == 3 + 5


@pytest.mark.parametrize(
    ("prompt", "pool", "page", "largest"), [(17, 1024, 16, 975), (16, 1024, 16, 991), (10, 64, 1, 52)]
)
def test_largest_max_new_is_sglangs_silent_clip_and_fits_the_budget(prompt, pool, page, largest):
    """SGLang clips max_new_tokens to pool - paged(prompt) - page - 1 (max_new_tokens_for_memory)."""
    assert largest_max_new(prompt, pool, page) == largest
    assert Sequence(prompt, largest, held_tokens=0).worst_pages(page) <= pool // page


@dataclass
class Req:
    prompt: int
    max_new: int
    finish_at: int  # tokens generated when it stops (early stop <= max_new)
    locked: int = 0  # cached pages it reuses (locked while it runs)
    private: int = 0  # pages it allocated
    made: int = 0  # generated tokens

    def seq(self) -> Sequence:
        return Sequence(self.prompt, self.max_new, held_tokens=(self.locked + self.private) * PAGE)

    def tokens(self) -> int:  # KV it needs now: prefill done once private covers the prompt
        return self.prompt + self.made


class Pool:
    def __init__(self, total: int, chunk_pages: int) -> None:
        self.free, self.evictable, self.chunk = total, 0, chunk_pages
        self.running: list[Req] = []

    def take_page(self) -> None:
        if self.free == 0:
            assert self.evictable > 0, "the pool ran short: the engine would retract"
            self.evictable, self.free = self.evictable - 1, self.free + 1
        self.free -= 1

    def try_admit(self, req: Req, cached: int) -> bool:
        req.locked = min(cached, self.evictable, req.prompt // PAGE)
        self.evictable -= req.locked  # the candidate's prefix lock
        budget = PassBudget(PAGE)
        for r in self.running:
            budget.commit(r.seq())
        if not budget.fits(req.seq(), self.free + self.evictable):
            self.evictable += req.locked
            return False
        self.running.append(req)
        return True

    def step(self) -> None:
        for r in list(self.running):
            if (r.locked + r.private) * PAGE < r.prompt:  # a prefill chunk
                for _ in range(min(self.chunk, pages(r.prompt, PAGE) - r.locked - r.private)):
                    self.take_page()
                    r.private += 1
                continue
            r.made += 1
            if pages(r.tokens(), PAGE) > r.locked + r.private:
                self.take_page()
                r.private += 1
            if r.made >= r.finish_at:
                self.leave(r, to_cache=True)

    def leave(self, r: Req, to_cache: bool) -> None:  # finished (its pages cached) or aborted
        self.running.remove(r)
        self.evictable += r.locked + (r.private if to_cache else 0)
        self.free += 0 if to_cache else r.private

    def outstanding(self) -> int:
        return sum(r.seq().outstanding_pages(PAGE) for r in self.running)


request = st.tuples(st.integers(1, 40), st.integers(1, 40), st.floats(0.05, 1.0), st.integers(0, 8))


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(24, 60),
    chunk=st.integers(1, 4),
    arrivals=st.lists(request, min_size=1, max_size=30),
    aborts=st.sets(st.integers(0, 29), max_size=5),
)
def test_reservations_never_exceed_free_plus_evictable_and_decode_never_runs_short(total, chunk, arrivals, aborts):
    pool = Pool(total, chunk)
    waiting = [
        (i, Req(p, m, max(1, int(m * stop))))
        for i, (p, m, stop, _) in enumerate(arrivals)
        if pages(p + m + 1, PAGE) <= total
    ]
    cached = {i: c for i, (*_, c) in enumerate(arrivals)}
    for _ in range(2000):
        while waiting and pool.try_admit(waiting[0][1], cached[waiting[0][0]]):
            index, req = waiting.pop(0)
            if index in aborts and len(pool.running) > 1:
                pool.leave(req, to_cache=False)
        assert pool.outstanding() <= pool.free + pool.evictable
        if not pool.running and not waiting:
            break
        pool.step()
        assert pool.free + pool.evictable + sum(r.locked + r.private for r in pool.running) == total
    assert not waiting and not pool.running  # everything admitted, ran and left

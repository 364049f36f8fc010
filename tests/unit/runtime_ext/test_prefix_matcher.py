"""The combined-block page radix (pure): exact expectations for full units, a partial trailing
unit, a missing middle page, namespaces, eviction under lock, and C = 1 equal to plain page
matching (property test against a naive reference)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_ext.prefix_cache.matcher import PageRadix

P = 2  # tokens per page


def seq(n_pages, start=0):
    return list(range(start, start + n_pages * P))


def test_full_units_are_reused_and_a_partial_trailing_unit_is_abandoned():
    tree = PageRadix.simulate(P, 2, [seq(5)])  # pages 0..4: units (0,1), (2,3), then page 4 alone
    m = tree.match(None, seq(5) + [99])
    assert m.pages == [0, 1, 2, 3] and m.tokens == 4 * P and m.abandoned_pages == 1
    assert tree.counters.hit_tokens == 8 and tree.counters.miss_tokens == 3 and tree.counters.abandoned_pages == 1
    assert PageRadix.simulate(P, 1, [seq(5)]).match(None, seq(5)).pages == [0, 1, 2, 3, 4]


def test_a_missing_middle_page_ends_the_match_at_the_last_complete_unit():
    tree = PageRadix.simulate(P, 2, [seq(6)])
    query = seq(6)
    query[2 * P] = -1  # page 2 differs: units (0,1) ok, unit (2,3) broken
    m = tree.match(None, query)
    assert m.pages == [0, 1] and m.abandoned_pages == 0  # page 2 never matched: nothing abandoned
    query = seq(6)
    query[3 * P] = -1  # page 3 differs: page 2 matched but its unit is incomplete
    m = tree.match(None, query)
    assert m.pages == [0, 1] and m.abandoned_pages == 1


def test_contiguous_ids_are_required_when_asked():
    tree = PageRadix(P, 2, contiguous_ids=True)
    tree.insert(None, seq(4), [10, 11, 20, 22])
    assert tree.match(None, seq(4)).pages == [10, 11]
    loose = PageRadix(P, 2)
    loose.insert(None, seq(4), [10, 11, 20, 22])
    assert loose.match(None, seq(4)).pages == [10, 11, 20, 22]


def test_namespaces_never_share_pages():
    tree = PageRadix(P, 1)
    tree.insert("lora-a", seq(3), [0, 1, 2])
    assert tree.match("lora-b", seq(3)).pages == [] and tree.match(None, seq(3)).pages == []
    assert tree.match("lora-a", seq(3)).pages == [0, 1, 2]


def test_insert_keeps_existing_pages_and_returns_the_duplicates():
    tree = PageRadix.simulate(P, 1, [seq(2)])
    assert tree.insert(None, seq(3), [7, 8, 9]) == [7, 8]
    assert tree.match(None, seq(3)).pages == [0, 1, 9]
    with pytest.raises(ValueError, match="3 full pages"):
        tree.insert(None, seq(3), [1])


def test_eviction_under_lock_and_whole_units():
    # ids 0..3: one path; the second sequence shares pages 0, 1 (its ids 4, 5 come back as
    # duplicates) and adds 6, 7 (unit 1 of its branch) and 8 (a trailing unit of one page)
    tree = PageRadix.simulate(P, 2, [seq(4), seq(2) + seq(3, start=100)])
    assert tree.total_pages() == 7
    m = tree.match(None, seq(4))
    tree.lock(m.node)
    assert tree.evict(1) == [8]  # least recently used unlocked leaf; it fills its unit alone
    assert tree.match(None, seq(2) + seq(2, start=100)).pages == [0, 1, 6, 7]
    assert tree.evict(100) == [7, 6]  # a whole unit, never half of it; the locked path survives
    assert tree.total_pages() == 4 and tree.match(None, seq(4)).pages == [0, 1, 2, 3]
    tree.unlock(m.node)
    assert sorted(tree.evict(100)) == [0, 1, 2, 3] and tree.total_pages() == 0
    with pytest.raises(RuntimeError, match="unlock without"):
        tree.unlock(m.node)


def naive_match(sequences, query):
    """Plain page matching: the longest full-page prefix of query shared with any stored sequence."""
    best = 0
    for s in sequences:
        n = 0
        while (n + 1) * P <= min(len(s), len(query)) and s[n * P : (n + 1) * P] == query[n * P : (n + 1) * P]:
            n += 1
        best = max(best, n)
    return best


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 2), max_size=12), min_size=1, max_size=6), st.lists(st.integers(0, 2), max_size=12)
)
def test_combine_1_equals_plain_page_matching(sequences, query):
    tree = PageRadix.simulate(P, 1, sequences)
    assert tree.match(None, query).tokens == naive_match(sequences, query) * P
    for c in (2, 3):
        assert (
            PageRadix.simulate(P, c, sequences).match(None, query).tokens
            == (naive_match(sequences, query) // c) * c * P
        )

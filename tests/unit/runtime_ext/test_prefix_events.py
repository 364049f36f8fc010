"""The prefix-cache event stream (pure): position-aware chained page hashes, namespaces, and a
replay of stored/removed events that rebuilds the set of cached pages."""

from __future__ import annotations

import io
import json

from runtime_ext.prefix_cache.events import EventLog, page_hashes, replay


def test_page_hashes_name_a_page_with_its_whole_prefix():
    a = page_hashes([1, 2, 3, 4, 5, 6, 7], 2)
    assert len(a) == 3  # the trailing partial page is not a block
    assert page_hashes([1, 2, 3, 4, 9, 9], 2)[:2] == a[:2]  # shared prefix, shared names
    assert page_hashes([1, 2, 3, 4, 9, 9], 2)[2] != a[2]
    assert page_hashes([9, 9, 3, 4], 2)[1] != a[1]  # same tokens, other prefix: another block
    assert page_hashes([1, 2, 3, 4], 2, namespace=("lora-a", None)) != a[:2]  # namespaces never collide
    assert page_hashes([12, 3], 2) != page_hashes([1, 23], 2)  # token boundaries are part of the name


def test_events_replay_to_the_cached_pages():
    stream = io.StringIO()
    log = EventLog(stream, page_size=2)
    log.stored(None, [1, 2, 3, 4], first_new_page=0)
    log.stored(None, [1, 2, 3, 4, 5, 6, 7], first_new_page=2)  # pages 0-1 were already there
    log.hit(None, [1, 2, 3, 4, 8], reused=4)
    log.removed(None, [1, 2, 3, 4, 5, 6], n_pages=1)  # the leaf page [5, 6] left the tree
    lines = stream.getvalue().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["stored", "stored", "hit", "removed"]
    assert events[1]["hashes"] == page_hashes([1, 2, 3, 4, 5, 6], 2)[2:]
    assert events[2]["hashes"] == page_hashes([1, 2, 3, 4], 2) and events[2]["miss_tokens"] == 1
    assert replay(lines) == set(page_hashes([1, 2, 3, 4], 2))
    log.cleared()
    assert replay(stream.getvalue().splitlines()) == set()

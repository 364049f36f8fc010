"""pd_link_down: the prefill replica is SIGKILLed while decode holds pages for a request whose KV
it has not sent yet (the prefill is stopped first, so the request waits in decode's transfer
queue). The client's error arrives within 2 s of the kill (goal: 1 s), decode's free pages are back to
their count before the request within a second, the gateway sent the request to decode at most
twice (one retry), and decode counts the link-down event and the pages it freed without SGLang's
hold. (The gateway drops decode's half when the prefill's connection breaks, so decode sees an
abort, then its probe proves the prefill down and frees the held pages.)

It runs last on the package's one topology (test_pd.py runs first): the prefill ends dead."""

from __future__ import annotations

import signal
import time

import pytest

from tests.pd.held import HeldRequest, decode_requests, free_tokens, pd_stat

pytestmark = pytest.mark.timeout(900)


def test_a_killed_prefill_fails_its_request_at_once_and_decode_frees_the_pages(pd) -> None:
    held = HeldRequest(pd, "Where is pallet 7?")
    assert held.serves()
    time.sleep(1.0)
    idle_free, before = free_tokens(pd.decode), decode_requests(pd.decode)
    held.hold(idle_free)  # frozen, not dead: its port still accepts, decode waits for the KV
    killed_at = time.monotonic()
    held.signal(signal.SIGKILL)
    error, waited = held.ended(killed_at, "the kill")
    assert error is not None
    # The goal is 1 s: measured 0.17-0.21 s on a quiet machine (smg's request to the killed prefill
    # fails at once), 1.41 s at load average 50-70 (smg then waits for decode's half, which answers
    # on its disconnect poll or once the probe proves the prefill down). 2 s: a loaded CI machine.
    assert waited <= 2.0, f"the client's error came {waited:.2f} s after the kill ({error})"
    assert held.pages_back(idle_free, by=killed_at + 1.0), "decode still holds the failed request's pages 1 s after"
    assert decode_requests(pd.decode) - before <= 2  # the request and at most one retry
    assert pd_stat(pd.decode, "link_down_events") >= 1
    assert pd_stat(pd.decode, "pages_reclaimed") >= 1

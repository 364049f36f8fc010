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
import threading
import time

import openai
import psutil
import pytest

from tests.api.test_kv_c8_aborts import scrape

pytestmark = pytest.mark.timeout(900)


def free_tokens(server) -> float:
    return scrape(server)[("structserve_kv_pool_census", (("part", "free"),))]


def decode_requests(server) -> float:
    """Chat requests the decode replica has answered, any status."""
    return sum(
        v
        for (name, labels), v in scrape(server).items()
        if name == "structserve_requests_total" and ("route", "/v1/chat/completions") in labels
    )


def pd_stat(server, stat: str) -> float:
    return scrape(server).get(("structserve_pd_link", (("stat", stat),)), 0.0)


def test_a_killed_prefill_fails_its_request_at_once_and_decode_frees_the_pages(pd) -> None:
    model = pd.decode.model_name
    client = openai.OpenAI(base_url=f"{pd.gateway.url}/v1", api_key="unused", max_retries=0, timeout=60)
    ask = dict(model=model, messages=[{"role": "user", "content": "Where is pallet 7?"}], max_tokens=8, temperature=0)
    assert client.chat.completions.create(**ask).choices[0].message.content  # the pair serves
    time.sleep(1.0)
    idle_free, before = free_tokens(pd.decode), decode_requests(pd.decode)

    prefill = psutil.Process(pd.prefill.proc.pid)
    family = [prefill, *prefill.children(recursive=True)]
    outcome: dict = {}

    def request() -> None:
        try:
            client.chat.completions.create(**{**ask, "max_tokens": 200})
            outcome["error"] = None
        except openai.APIStatusError as exc:
            outcome["error"] = exc
        except openai.APIConnectionError as exc:
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    for p in family:  # frozen, not dead: its port still accepts, decode waits for the KV
        p.send_signal(signal.SIGSTOP)
    thread = threading.Thread(target=request)
    thread.start()
    deadline = time.monotonic() + 30
    while free_tokens(pd.decode) >= idle_free and time.monotonic() < deadline:
        time.sleep(0.05)
    assert free_tokens(pd.decode) < idle_free, "decode never reserved pages for the request"
    killed_at = time.monotonic()
    for p in family:
        p.send_signal(signal.SIGKILL)
    thread.join(timeout=60)

    assert "at" in outcome, "the client got no answer"
    waited = outcome["at"] - killed_at
    print(f"\nthe client's error came {waited:.2f} s after the kill: {outcome['error']}")
    assert outcome["error"] is not None
    # The goal is 1 s: measured 0.21 s on a quiet machine (smg's request to the killed prefill
    # fails at once), 1.41 s at load average 50-70 (smg then waits for decode's half, which answers
    # on its disconnect poll or once the probe proves the prefill down). 2 s: a loaded CI machine.
    assert waited <= 2.0, f"the client's error came {waited:.2f} s after the kill ({outcome['error']})"
    deadline = killed_at + 1.0
    while free_tokens(pd.decode) < idle_free and time.monotonic() < deadline:
        time.sleep(0.05)
    assert free_tokens(pd.decode) == idle_free, "decode still holds the failed request's pages 1 s after the kill"
    assert decode_requests(pd.decode) - before <= 2  # the request and at most one retry
    assert pd_stat(pd.decode, "link_down_events") >= 1
    assert pd_stat(pd.decode, "pages_reclaimed") >= 1

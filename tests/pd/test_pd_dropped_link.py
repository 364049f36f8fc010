"""pd_link_down without a dead process: the link between a live prefill and decode is dropped
(every TCP port either side listens on for PD — the bootstrap server, Mooncake's transfer engine,
the KV senders — answers with a reset, as a peer behind a broken link or a restarted switch port
does), while decode holds pages for a request whose KV has not arrived. The client's error comes
within 2 s of the drop (goal 1 s), decode's pages come back within a second, and once the link is
back the same pair serves again.

The drop is an iptables REJECT (tcp-reset) on loopback, so the test needs root and iptables; the
rules carry a comment and are removed however the test ends. It runs before
test_pd_link_down.py, which kills the prefill."""

from __future__ import annotations

import signal
import subprocess
import time

import openai
import psutil
import pytest

from tests.pd.held import HeldRequest, decode_requests, free_tokens, pd_stat

pytestmark = pytest.mark.timeout(900)
TAG = "structserve-test-pd-link"


def pd_ports(pd) -> set[int]:
    """The TCP ports the two replicas listen on, but their HTTP ports (the gateway's path)."""
    ports = {pd.bootstrap_port}
    for replica in (pd.prefill, pd.decode):
        root = psutil.Process(replica.proc.pid)
        for proc in (root, *root.children(recursive=True)):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(conn.laddr.port)
    return ports - {pd.prefill.port, pd.decode.port}


def iptables(*args: str) -> None:
    subprocess.run(["iptables", *args], check=True, capture_output=True, timeout=30)


class DroppedLink:
    def __init__(self, ports: set[int]) -> None:
        self.rules = [
            ["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(p), "-m", "comment", "--comment", TAG]
            + ["-j", "REJECT", "--reject-with", "tcp-reset"]
            for p in sorted(ports)
        ]

    def __enter__(self) -> "DroppedLink":
        try:
            for rule in self.rules:
                iptables("-I", *rule)
        except BaseException:
            self.restore()
            raise
        return self

    def restore(self) -> None:
        for rule in self.rules:
            subprocess.run(["iptables", "-D", *rule], capture_output=True, timeout=30)

    def __exit__(self, *exc) -> None:
        self.restore()


def test_a_dropped_link_fails_the_request_at_once_and_the_pair_serves_after(pd) -> None:
    held = HeldRequest(pd, "Which dock is free?")
    assert held.serves()
    time.sleep(1.0)
    idle_free, events_before = free_tokens(pd.decode), pd_stat(pd.decode, "link_down_events")
    requests_before = decode_requests(pd.decode)
    link = DroppedLink(pd_ports(pd))
    try:
        held.hold(idle_free)
        with link:
            dropped_at = time.monotonic()
            held.signal(signal.SIGCONT)  # alive again, behind a dropped link
            error, waited = held.ended(dropped_at, "the link dropped")
            assert isinstance(error, openai.APIStatusError), error
            assert "pd_link_down" in str(error), error
            assert waited <= 2.0, f"the client's error came {waited:.2f} s after the drop ({error})"
            assert held.pages_back(idle_free, by=dropped_at + 1.0), "decode still holds the failed request's pages"
            assert pd_stat(pd.decode, "link_down_events") > events_before
            assert decode_requests(pd.decode) - requests_before <= 2  # the request and at most one retry
    finally:
        held.signal(signal.SIGCONT)
        link.restore()
    # the link is back: the same pair serves (decode re-handshakes with the prefill)
    deadline = time.monotonic() + 30
    while True:
        try:
            assert held.serves()
            break
        except openai.APIStatusError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)

"""runtime_ext.pd.link_down's probe on real loopback sockets: a listening port is alive (also
when nobody accepts yet: a stopped process's backlog), a closed one is down within milliseconds."""

from __future__ import annotations

import socket
import time

from runtime_ext.pd.link_down import refused


def test_a_listening_port_is_not_down_even_when_nobody_accepts() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accept(): like a SIGSTOPped prefill, the kernel still completes the handshake
        assert not refused(f"127.0.0.1:{listener.getsockname()[1]}")


def test_a_closed_port_is_down_at_once() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        start = time.monotonic()
        assert refused(f"127.0.0.1:{port}")
        assert time.monotonic() - start < 0.05

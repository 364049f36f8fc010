"""pd_link_down on the decode side: a prefill whose bootstrap port refuses connections is down,
at once and for good, and the KV pages decode reserved for its transfers go back to the pool
without waiting.

What SGLang 0.5.23 does on its own (``disaggregation/common/conn.py``, ``decode.py``):
- it notices a dead prefill only through its heartbeat, every 5 s (at least 2 s) with 2 misses
  allowed, so 10-16 s after the death; ``_handle_node_failure`` then fails the prefill's rooms
  and the scheduler aborts their requests (500, "Lost connection with prefill instance");
- the aborted requests' pages are *held* (``SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE``)
  until every prefill rank acks the abort, or 30 s pass: a dead prefill never acks, so 30 s.

What this adds (hooks on ``CommonKVManager``, used by Mooncake):
- a probe thread beside SGLang's heartbeat: every ``PROBE_INTERVAL_S`` a TCP connect to each
  known prefill's bootstrap address. A refused (or reset) connection is a hard error: nothing
  listens there any more. Two in a row (one interval apart) make the link down: SGLang's own
  ``_handle_node_failure`` runs for that prefill at once (its rooms fail, later requests to it
  re-handshake). A timeout is not hard: SGLang's heartbeat keeps judging those.
- ``is_abort_release_safe`` answers yes for the rooms of a prefill proven down this way (those it
  failed, and those already aborted and held, e.g. dropped by the gateway when the prefill died), when
  the transport is TCP (``MC_FORCE_TCP=1``, the ``mooncake_tcp`` backend): over TCP the bytes are
  written into decode's pages by decode's own transfer engine, reading the dead peer's socket,
  so once the peer's process is gone (its port refuses connections twice) nothing more arrives.
  Over RDMA the peer's NIC writes into decode's memory directly; there SGLang's hold is kept,
  as it is for every failure not proven by a refused connection.

Counted here (the scheduler's plugin report; ``/metrics``): link-down events, requests failed
fast, pages reclaimed without the hold.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

MANAGER = "sglang.srt.disaggregation.common.conn.CommonKVManager"
DECODE_QUEUE = "sglang.srt.disaggregation.decode.DecodeTransferQueue"
PROBE_INTERVAL_S = 0.1
STRIKES = 2  # refused connections in a row that make a link down
HARD_ERRORS = (ConnectionRefusedError, ConnectionResetError)


@dataclass
class LinkStats:
    link_down_events: int = 0
    requests_failed_fast: int = 0
    pages_reclaimed: int = 0
    down_rooms: set[int] = field(default_factory=set)  # failed by a proven link down, not yet released
    down_addrs: set[str] = field(default_factory=set)  # prefills proven down over TCP (until they answer again)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self) -> dict[str, int]:
        with self.lock:
            return {
                "link_down_events": self.link_down_events,
                "requests_failed_fast": self.requests_failed_fast,
                "pages_reclaimed": self.pages_reclaimed,
            }


STATS = LinkStats()  # this process's (the decode scheduler's)


def refused(address: str, timeout: float = 0.5) -> bool:
    """True when nothing accepts TCP connections at ``host:port`` (refused or reset)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except HARD_ERRORS:
        return True
    except OSError:  # a timeout or an unreachable network: not proof of a dead peer
        return False
    return False


def over_tcp() -> bool:
    return os.environ.get("MC_FORCE_TCP") == "1"


def declare_down(manager: Any, address: str, stats: LinkStats = STATS) -> None:
    """The prefill at ``address`` is down: fail its rooms now through SGLang's own handler."""
    from sglang.srt.disaggregation.base.conn import KVPoll

    with manager.connection_lock:
        rooms = set(manager.addr_to_rooms_tracker.get(address, ()))
    pending = {r for r in rooms if r in manager.request_status and manager.check_status(r) != KVPoll.Success}
    with stats.lock:
        stats.link_down_events += 1
        stats.requests_failed_fast += len(pending)
        if over_tcp():
            stats.down_rooms |= pending
            stats.down_addrs.add(address)
    manager._handle_node_failure(address)


def probe_loop(manager: Any, stats: LinkStats = STATS, interval: float = PROBE_INTERVAL_S) -> None:
    strikes: dict[str, int] = {}
    while not manager._heartbeat_shutdown.wait(interval):
        with manager.connection_lock:
            addresses = list(manager.prefill_info_table.keys())
        for address in addresses:
            if not refused(address, timeout=max(interval, 0.2)):
                strikes.pop(address, None)
                with stats.lock:
                    stats.down_addrs.discard(address)
                continue
            strikes[address] = strikes.get(address, 0) + 1
            if strikes[address] >= STRIKES:
                strikes.pop(address)
                declare_down(manager, address, stats)


def start_with_probe(original: Any, manager: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang's heartbeat thread, and the link probe beside it."""
    threading.Thread(target=probe_loop, args=(manager,), name="PDLinkProbe", daemon=True).start()
    return original(manager, *args, **kwargs)


def release_safe(original: Any, manager: Any, room: int, *args: Any, **kwargs: Any) -> Any:
    """SGLang's answer, or yes for a room whose prefill is proven down over TCP."""
    with STATS.lock:
        if room in STATS.down_rooms:
            return True
    return original(manager, room, *args, **kwargs)


def release_held_for_down_peers(original: Any, queue: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang's pass over the held (deferred) releases; a request aborted for any reason (the
    gateway dropping it when the prefill died, a client going away) whose prefill is proven down
    over TCP is released in this pass instead of waiting for an ack that cannot come."""
    with STATS.lock:
        down = set(STATS.down_addrs)
    if down:
        for entry in getattr(queue, "_deferred_releases", ()):
            receiver = getattr(entry[0], "kv_receiver", None)
            if getattr(receiver, "bootstrap_addr", None) in down:
                with STATS.lock:
                    STATS.down_rooms.add(entry[0].req.bootstrap_room)
    return original(queue, *args, **kwargs)


def counted_release(original: Any, queue: Any, decode_req: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang's release of a failed request's pages; counts those released without the hold."""
    room = decode_req.req.bootstrap_room
    with STATS.lock:
        early = room in STATS.down_rooms
    if not early:
        return original(queue, decode_req, *args, **kwargs)
    allocator = queue.scheduler.token_to_kv_pool_allocator
    before = allocator.available_size()
    result = original(queue, decode_req, *args, **kwargs)
    with STATS.lock:
        STATS.down_rooms.discard(room)
        STATS.pages_reclaimed += max(0, allocator.available_size() - before) // allocator.page_size
    return result


def register(hooks: Any, hook_type: Any) -> None:
    hooks.register(f"{MANAGER}._start_heartbeat_checker_thread", start_with_probe, hook_type.AROUND)
    hooks.register(f"{MANAGER}.is_abort_release_safe", release_safe, hook_type.AROUND)
    hooks.register(f"{DECODE_QUEUE}.resolve_deferred_releases", release_held_for_down_peers, hook_type.AROUND)
    hooks.register(f"{DECODE_QUEUE}._do_release", counted_release, hook_type.AROUND)

"""Admission logic (pure): API keys, per-key token buckets, running + queued bound."""

from __future__ import annotations

import asyncio

import pytest

from service.errors import AuthenticationError, OverloadedError
from service.limits import ANONYMOUS, Admission, KeyRing, TokenBucket, load_keys


def test_keys_from_env_and_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# ops keys\nk-file-1\n\n  k-file-2  # rotated 2026-11\n")
    assert load_keys(" k1, ,k2 ", path) == ("k1", "k2", "k-file-1", "k-file-2")
    assert load_keys(None, None) == ()


def test_keyring():
    ring = KeyRing(["alpha", "beta"])
    assert ring.check("Bearer beta") == 1 and ring.check("bearer   alpha") == 0
    for header, word in (
        (None, "missing"),
        ("Bearer ", "missing"),
        ("Basic alpha", "missing"),
        ("Bearer alphax", "invalid"),
        ("Bearer alph", "invalid"),
    ):
        with pytest.raises(AuthenticationError, match=word):
            ring.check(header)
    assert KeyRing([]).check(None) is None  # no keys: open


def test_token_bucket_refills_at_its_rate():
    bucket = TokenBucket(per_minute=60, burst=3)  # one per second
    for _ in range(3):
        bucket.take("a", now=100.0)
    with pytest.raises(OverloadedError) as exc:
        bucket.take("a", now=100.2)
    assert exc.value.retry_after == 1 and exc.value.status == 429
    bucket.take("b", now=100.2)  # other keys have their own bucket
    bucket.take("a", now=101.3)  # refilled one
    with pytest.raises(OverloadedError):
        bucket.take("a", now=101.4)
    slow = TokenBucket(per_minute=2, burst=1)
    slow.take(None, now=0.0)
    with pytest.raises(OverloadedError) as exc:
        slow.take(None, now=1.0)
    assert exc.value.retry_after == 29  # one request per 30 s, 1 s already passed


def test_admission_runs_queues_fifo_and_refuses_beyond():
    async def scenario():
        gate, order = Admission(max_running=2, max_queued=2), []
        await gate.acquire()
        await gate.acquire()
        waiters = [asyncio.create_task(_enter(gate, order, name)) for name in ("q1", "q2")]
        await asyncio.sleep(0)
        assert (gate.running, gate.queued) == (2, 2)
        with pytest.raises(OverloadedError) as exc:
            await gate.acquire()
        assert exc.value.code == "server_busy" and exc.value.retry_after == 1
        gate.release()
        gate.release()
        await asyncio.gather(*waiters)
        assert order == ["q1", "q2"] and (gate.running, gate.queued) == (2, 0)
        gate.release()
        gate.release()
        assert gate.running == 0

    asyncio.run(scenario())


def test_admission_cancelled_waiter_gives_no_slot_away():
    async def scenario():
        gate = Admission(max_running=1, max_queued=3)
        await gate.acquire()
        cancelled = asyncio.create_task(gate.acquire())
        kept = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert gate.queued == 1
        gate.release()  # goes to the waiter still there
        await kept
        assert (gate.running, gate.queued) == (1, 0)
        gate.release()
        assert gate.running == 0

    asyncio.run(scenario())


async def _enter(gate: Admission, order: list, name: str) -> None:
    await gate.acquire()
    order.append(name)


def test_owner_ids_are_stable_hashes_of_the_keys():
    ring, reordered = KeyRing(["alpha", "beta"]), KeyRing(["beta", "gamma", "alpha"])
    assert ring.owner(0) == reordered.owner(2) and ring.owner(1) == reordered.owner(0)  # not the list index
    assert ring.owner(0) != ring.owner(1) and len(ring.owner(0)) == 32
    assert "alpha" not in ring.owner(0) and ring.owner(0) != "alpha"
    assert KeyRing([]).owner(KeyRing([]).check(None)) == ANONYMOUS

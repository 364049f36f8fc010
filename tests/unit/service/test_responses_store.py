"""The response store, both kinds (this replica's memory; a real redis-server on loopback):
entries belong to their owner (another owner's id is exactly an unknown id), expire after the
TTL, and are bounded in bytes per entry and in total; an unreachable Redis is a 503."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from service.api.routes.responses import open_store
from service.errors import NotFoundError, StoreUnavailableError
from service.protocol.responses import MessageItem, OutputText
from service.protocol.responses_output import Response, ResponseOutputMessage
from service.responses_store import MemoryResponseStore, ResponseStore
from service.settings import ResponsesSettings
from tests.redis_server import RedisServer
from tests.server import free_port

KINDS = ("memory", "redis")


def response(text: str = "hello there") -> tuple[Response, tuple]:
    """A response and the inputs of its request chain."""
    rid = f"resp_{uuid.uuid4().hex}"
    out = ResponseOutputMessage(id=f"msg_{uuid.uuid4().hex}", status="completed", content=[OutputText(text=text)])
    made = Response(id=rid, created_at=int(time.time()), status="completed", model="m", output=[out], store=True)
    return made, (MessageItem(role="user", content="hi"),)


def make_store(kind: str, redis_url: str | None, **bounds: int) -> ResponseStore:
    return open_store(ResponsesSettings(store=kind, redis_url=redis_url if kind == "redis" else None, **bounds))


def run(kind: str, redis_server, scenario, **bounds: int) -> None:
    """Runs ``scenario(store)`` in one event loop (the asyncio Redis client is bound to it)."""

    async def main() -> None:
        store = make_store(kind, redis_server.url if kind == "redis" else None, **bounds)
        try:
            await scenario(store)
        finally:
            await store.close()

    asyncio.run(main())


async def refusal(call) -> tuple:
    with pytest.raises(NotFoundError) as exc:
        await call
    return exc.value.status, exc.value.message, exc.value.code, exc.value.param


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_belongs_to_its_owner(kind, redis_server):
    owner_a, owner_b = uuid.uuid4().hex, uuid.uuid4().hex
    made, conversation = response()

    async def scenario(store: ResponseStore) -> None:
        assert await store.put(owner_a, made, conversation)
        got = await store.get(owner_a, made.id, None, "response_not_found")
        assert got.response.model_dump() == made.model_dump()
        expected = [*conversation, *made.output]  # the chain's inputs, then this response's output
        assert [i.model_dump() for i in got.conversation] == [i.model_dump() for i in expected]
        # another owner: the very refusal an unknown id gets (no existence oracle)
        theirs = await refusal(store.get(owner_b, made.id, "previous_response_id", "previous_response_not_found"))
        unknown = await refusal(store.get(owner_b, "resp_x", "previous_response_id", "previous_response_not_found"))
        assert theirs == (404, unknown[1].replace("resp_x", made.id), *unknown[2:])
        assert await refusal(store.delete(owner_b, made.id)) == await refusal(
            store.get(owner_b, made.id, None, "response_not_found")
        )
        assert (await store.get(owner_a, made.id, None, "x")).response.id == made.id  # B's delete did nothing
        await store.delete(owner_a, made.id)
        await refusal(store.get(owner_a, made.id, None, "response_not_found"))

    run(kind, redis_server, scenario)


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_expires_after_the_ttl(kind, redis_server):
    owner = uuid.uuid4().hex
    made, conversation = response()

    async def scenario(store: ResponseStore) -> None:
        assert await store.put(owner, made, conversation)
        await asyncio.sleep(0.5)
        assert (await store.get(owner, made.id, None, "x")).response.id == made.id  # a read does not extend it
        await asyncio.sleep(0.7)
        await refusal(store.get(owner, made.id, None, "response_not_found"))

    run(kind, redis_server, scenario, ttl_s=1)


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_above_the_bound_is_not_stored(kind, redis_server):
    owner = uuid.uuid4().hex
    small, small_conv = response("short")
    large, large_conv = response("x" * 1500)

    async def scenario(store: ResponseStore) -> None:
        assert not await store.put(owner, large, large_conv)
        await refusal(store.get(owner, large.id, None, "response_not_found"))
        assert await store.put(owner, small, small_conv)
        assert (await store.get(owner, small.id, None, "x")).response.id == small.id

    run(kind, redis_server, scenario, max_entry_bytes=1024)


def test_memory_total_bound_evicts_the_oldest():
    made = [response("y" * 400) for _ in range(6)]
    size = len(made[0][0].model_dump_json()) + 400  # a lower bound of one entry's bytes

    async def scenario() -> None:
        store = MemoryResponseStore(ttl_s=60, max_entry_bytes=1 << 20, max_total_bytes=3 * size + size // 2)
        for item, conversation in made:
            assert await store.put("o", item, conversation)
            assert store.total_bytes <= store.max_total_bytes
        present = []
        for item, _ in made:
            try:
                present.append((await store.get("o", item.id, None, "x")).response.id)
            except NotFoundError:
                pass
        assert present == [item.id for item, _ in made][-len(present) :] and 1 <= len(present) < 6, present

    asyncio.run(scenario())


@pytest.mark.parametrize("policy", ["volatile-ttl", "noeviction"])
def test_redis_total_bound_is_its_maxmemory(policy, tmp_path):
    """With volatile-ttl (deploy/compose.yaml) a full Redis drops the oldest entries; with
    noeviction it refuses the write, and the entry is simply not stored (no error)."""
    server = RedisServer(tmp_path, "--maxmemory", "3mb", "--maxmemory-policy", policy)
    made = [response("z" * 100_000) for _ in range(40)]  # ~4 MB of entries

    async def scenario() -> None:
        store = make_store("redis", server.url)
        try:
            stored = [await store.put("o", item, conversation) for item, conversation in made]
            if policy == "volatile-ttl":
                assert all(stored)
                await refusal(store.get("o", made[0][0].id, None, "response_not_found"))
            else:
                assert stored[0] and not stored[-1], stored
            assert (await store.get("o", made[0 if policy == "noeviction" else -1][0].id, None, "x")) is not None
        finally:
            await store.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_unreachable_redis_is_a_503(tmp_path):
    server = RedisServer(tmp_path)
    made, conversation = response()

    async def scenario() -> None:
        store = make_store("redis", server.url)
        try:
            assert await store.put("o", made, conversation)
            server.stop()  # Redis goes away under a client with a pooled connection
            for call in (
                store.check(),
                store.put("o", made, conversation),
                store.get("o", made.id, None, "x"),
                store.delete("o", made.id),
            ):
                with pytest.raises(StoreUnavailableError) as exc:
                    await call
                assert exc.value.status == 503 and exc.value.code == "store_unavailable"
        finally:
            await store.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()

    async def never_listened() -> None:
        store = make_store("redis", f"redis://127.0.0.1:{free_port()}/0")  # nothing ever listened there
        try:
            with pytest.raises(StoreUnavailableError):
                await store.check()
        finally:
            await store.close()

    asyncio.run(never_listened())


def test_a_redis_store_without_a_url_stops_naming_the_setting():
    with pytest.raises(ValueError, match="responses.redis_url"):
        ResponsesSettings(store="redis")
    with pytest.raises(ValueError, match="responses.redis_url"):  # built around the validation
        open_store(ResponsesSettings.model_construct(store="redis", redis_url=None))

"""Shared fixtures: asset paths and real structserve servers on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.server import ServerProcess

pytest_plugins = ["tests.suite_clock"]


@pytest.fixture(scope="session")
def assets():
    """The verified, converted assets (`make test` fetched them already)."""
    from assets import fetch

    return fetch()


def start_server(model_dir, name: str, **env: str):
    server = ServerProcess(model_dir, name=name, env=env)
    server.start()
    return server


@pytest.fixture(scope="session")
def qwen_server(assets):
    """structserve on the tiny random-weight Qwen3 (protocol tests), float32. Thinking is off
    unless a request turns it on: the random model never closes its reasoning block."""
    server = start_server(
        assets.qwen3_tiny, "qwen", STRUCTSERVE_DTYPE="float32", STRUCTSERVE_REASONING__DEFAULT_THINKING="false"
    )
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server on loopback (tests/redis_server.py) configured as deploy/compose.yaml's:
    bounded by maxmemory, evicting the entries closest to expiry (volatile-ttl)."""
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis"), "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
    yield server
    server.stop()

"""Shared fixtures: asset paths and real structserve servers on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.server import ServerProcess


@pytest.fixture(scope="session")
def assets():
    """The verified, converted assets (`make test` fetched them already)."""
    from service.assets import fetch

    return fetch()


def _server(model_dir, name: str, **env: str):
    server = ServerProcess(model_dir, name=name, env=env)
    server.start()
    return server


@pytest.fixture(scope="session")
def qwen_server(assets):
    """structserve on the tiny random-weight Qwen3 (protocol tests), float32. Thinking is off
    unless a request turns it on: the random model never closes its reasoning block."""
    server = _server(assets.qwen3_tiny, "qwen", STRUCTSERVE_DTYPE="float32",
                     STRUCTSERVE_REASONING__DEFAULT_THINKING="false")
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"


@pytest.fixture(scope="session")
def smol_server(assets):
    """structserve on SmolLM2-135M-Instruct (quality tests), in its own bfloat16."""
    server = _server(assets.smollm2, "smol")
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"


@pytest.fixture(scope="session")
def c8_server(assets):
    """structserve on the tiny Qwen3 with the INT8 KV cache (kv_cache: c8_dynamic)."""
    server = _server(assets.qwen3_tiny, "qwen-c8", STRUCTSERVE_DTYPE="float32", STRUCTSERVE_KV_CACHE="c8_dynamic",
                     STRUCTSERVE_REASONING__DEFAULT_THINKING="false")
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"

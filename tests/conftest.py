"""Shared fixtures: asset paths and real structserve servers on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.scripted_serve import SCRIPT_ENV
from tests.server import ScriptedServer, ServerProcess

pytest_plugins = ["tests.suite_clock"]


@pytest.fixture(scope="session")
def assets():
    """The verified, converted assets (`make test` fetched them already)."""
    from assets import fetch

    return fetch()


def _server(model_dir, name: str, **env: str):
    server = ServerProcess(model_dir, name=name, env=env)
    server.start()
    return server


@pytest.fixture(scope="session")
def qwen_server(assets):
    """structserve on the tiny random-weight Qwen3 (protocol tests), float32. Thinking is off
    unless a request turns it on: the random model never closes its reasoning block."""
    server = _server(
        assets.qwen3_tiny, "qwen", STRUCTSERVE_DTYPE="float32", STRUCTSERVE_REASONING__DEFAULT_THINKING="false"
    )
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
def scripted_server(assets, tmp_path_factory):
    """structserve on the tiny Qwen3 (float32) through tests/scripted_serve.py: the real service
    and engine, with test-chosen sampling params for reasoning phases and ``…-scripted``
    requests (tests/api/test_reasoning.py, tests/api/test_tool_stop.py)."""
    path = tmp_path_factory.mktemp("script") / "script.json"
    server = ServerProcess(
        assets.qwen3_tiny,
        "qwen-scripted",
        module="tests.scripted_serve",
        env={"STRUCTSERVE_DTYPE": "float32", SCRIPT_ENV: str(path)},
    )
    server.start()
    yield ScriptedServer(server, path)
    assert server.stop() == 0


C8_BUDGET = 2 << 20  # KV bytes for c8_server
C8_KEPT_LAYER = "model.layers.1.mlp.down_proj"  # c8_server keeps this linear layer in high precision


@pytest.fixture(scope="session")
def c8_server(assets, tmp_path_factory):
    """structserve on the tiny Qwen3 compressed both ways: W8A8 linear layers (one kept in high
    precision) and the INT8 KV cache with residuals (kv_cache: c8_static_residual, calibrated
    on the calibration split), the pool sized by a byte budget; prefixes reused by runtime_ext's
    combined-block radix cache (4 pages of 16 tokens per unit); budget admission."""
    from assets import calibration_text
    from tools.kv_calibrate import calibrate

    calib = tmp_path_factory.mktemp("kv") / "qwen3-tiny.json"
    calibrate(assets.qwen3_tiny, calibration_text(), tokens=512).save(calib)
    server = _server(
        assets.qwen3_tiny,
        "qwen-c8",
        STRUCTSERVE_DTYPE="float32",
        STRUCTSERVE_KV_CACHE="c8_static_residual",
        STRUCTSERVE_KV_CALIBRATION=str(calib),
        STRUCTSERVE_ENGINE__KV_CACHE_BYTES=str(C8_BUDGET),
        STRUCTSERVE_REASONING__DEFAULT_THINKING="false",
        STRUCTSERVE_QUANTIZATION="w8a8_dynamic",
        STRUCTSERVE_QUANT__IGNORE=f'["{C8_KEPT_LAYER}"]',
        STRUCTSERVE_PREFIX_CACHE__BACKEND="combined",
        STRUCTSERVE_SCHEDULING__ADMISSION="budget",
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

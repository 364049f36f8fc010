"""The servers only tests/api uses, package-scoped: each is stopped when the last API test is done,
so the engines of later folders (the PD pair, the fault server) do not run beside four idle ones
(each structserve process tree holds about 4 GB: server, scheduler and detokenizer processes).
``qwen_server`` stays in tests/conftest.py: tests/pd compares against it. Before the first API
test, the servers the selected API tests use are launched side by side (``LaunchAhead``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import LaunchAhead, qwen
from tests.scripted_serve import SCRIPT_ENV
from tests.server import ScriptedServer, ServerProcess

C8_BUDGET = 2 << 20  # KV bytes for c8_server
C8_KEPT_LAYER = "model.layers.1.mlp.down_proj"  # c8_server keeps this linear layer in high precision


def smol(assets, tmp_path_factory) -> ServerProcess:
    """SmolLM2-135M-Instruct (quality tests), in its own bfloat16."""
    return ServerProcess(assets.smollm2, name="smol")


def scripted(assets, tmp_path_factory) -> ServerProcess:
    """The tiny Qwen3 (float32) through tests/scripted_serve.py: the real service and engine, with
    test-chosen sampling params for reasoning phases and ``…-scripted`` requests
    (tests/api/test_reasoning.py, tests/api/test_tool_stop.py), read from the file in its env."""
    path = tmp_path_factory.mktemp("script") / "script.json"
    env = {"STRUCTSERVE_DTYPE": "float32", SCRIPT_ENV: str(path)}
    return ServerProcess(assets.qwen3_tiny, "qwen-scripted", module="tests.scripted_serve", env=env)


def c8(assets, tmp_path_factory) -> ServerProcess:
    """The tiny Qwen3 compressed both ways: W8A8 linear layers (one kept in high precision) and the
    INT8 KV cache with residuals (kv_cache: c8_static_residual, calibrated on the calibration
    split), the pool sized by a byte budget; prefixes reused by runtime_ext's combined-block radix
    cache (4 pages of 16 tokens per unit); budget admission."""
    from assets import calibration_text
    from tools.kv_calibrate import calibrate

    calib = tmp_path_factory.mktemp("kv") / "qwen3-tiny.json"
    calibrate(assets.qwen3_tiny, calibration_text(), tokens=512).save(calib)
    env = {
        "STRUCTSERVE_DTYPE": "float32",
        "STRUCTSERVE_KV_CACHE": "c8_static_residual",
        "STRUCTSERVE_KV_CALIBRATION": str(calib),
        "STRUCTSERVE_ENGINE__KV_CACHE_BYTES": str(C8_BUDGET),
        "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false",
        "STRUCTSERVE_QUANTIZATION": "w8a8_dynamic",
        "STRUCTSERVE_QUANT__IGNORE": f'["{C8_KEPT_LAYER}"]',
        "STRUCTSERVE_PREFIX_CACHE__BACKEND": "combined",
        "STRUCTSERVE_SCHEDULING__ADMISSION": "budget",
    }
    return ServerProcess(assets.qwen3_tiny, name="qwen-c8", env=env)


def first_family(assets, tmp_path_factory) -> ServerProcess:
    """The first model family's server (tests/family_model.py; the family tests launch each next
    family's server while the one before is tested)."""
    from tests.family_model import FAMILIES, family_server

    return family_server(next(iter(FAMILIES)), tmp_path_factory.mktemp("family"))


SERVERS = {  # fixture -> its server's configuration (assets, tmp_path_factory)
    "qwen_server": lambda assets, _: qwen(assets),
    "smol_server": smol,
    "scripted_server": scripted,
    "c8_server": c8,
    "family": first_family,
}


@pytest.fixture(scope="package", autouse=True)
def launch_servers_ahead(request, ahead, assets, tmp_path_factory):
    """The servers the selected API tests use start side by side, before the first test."""
    for name in LaunchAhead.needed(request, "tests/api/", SERVERS):
        ahead.launch(name, lambda: SERVERS[name](assets, tmp_path_factory))


def stopped(server: ServerProcess) -> None:
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"


@pytest.fixture(scope="package")
def smol_server(assets, ahead, tmp_path_factory):
    server = ahead.take("smol_server", lambda: smol(assets, tmp_path_factory))
    yield server
    stopped(server)


@pytest.fixture(scope="package")
def scripted_server(assets, ahead, tmp_path_factory):
    server = ahead.take("scripted_server", lambda: scripted(assets, tmp_path_factory))
    yield ScriptedServer(server, Path(server.env[SCRIPT_ENV]))
    stopped(server)


@pytest.fixture(scope="package")
def c8_server(assets, ahead, tmp_path_factory):
    server = ahead.take("c8_server", lambda: c8(assets, tmp_path_factory))
    yield server
    stopped(server)

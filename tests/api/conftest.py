"""The servers only tests/api uses, package-scoped: each is stopped when the last API test is done,
so the engines of later folders (the PD pair, the fault server) do not run beside four idle ones
(each structserve process tree holds about 4 GB: server, scheduler and detokenizer processes).
``qwen_server`` stays in tests/conftest.py: tests/pd compares against it."""

from __future__ import annotations

import pytest

from tests.conftest import start_server
from tests.scripted_serve import SCRIPT_ENV
from tests.server import ScriptedServer, ServerProcess


@pytest.fixture(scope="package")
def smol_server(assets):
    """structserve on SmolLM2-135M-Instruct (quality tests), in its own bfloat16."""
    server = start_server(assets.smollm2, "smol")
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
def c8_server(assets, tmp_path_factory):
    """structserve on the tiny Qwen3 compressed both ways: W8A8 linear layers (one kept in high
    precision) and the INT8 KV cache with residuals (kv_cache: c8_static_residual, calibrated
    on the calibration split), the pool sized by a byte budget; prefixes reused by runtime_ext's
    combined-block radix cache (4 pages of 16 tokens per unit); budget admission."""
    from assets import calibration_text
    from tools.kv_calibrate import calibrate

    calib = tmp_path_factory.mktemp("kv") / "qwen3-tiny.json"
    calibrate(assets.qwen3_tiny, calibration_text(), tokens=512).save(calib)
    server = start_server(
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

"""AWQ and GPTQ W4A16 g128 exports of SmolLM2 (`structserve quant calibrate --method awq|gptq`; GPTQ
asymmetric with act-order, ``--asym``: a zero point per group, served through the stored
``weight_offset``; few calibration tokens here) served by the real SGLang engine:

- held-out perplexity (a Persuasion window, prompt logprobs) below round-to-nearest's (RTN of
  the same base weights, fake-quantized in HF with the reference math of ``tools.quant.offline``);
- the served logprobs equal the offline evaluation of the same stored weights
  (``tools.quant.gptq.load_checkpoint``, serving math in HF), float32 both: float noise only.

The exports load as the service loads them (``quantization=modelslim``, the plugin's override picks
who serves them); `structserve serve` of an msModelSlim export through the openai client is
``test_quant_recipe.py``'s (one server start kept out of the suite's budget). Symmetric GPTQ is
held to RTN per layer (``tests/unit/tools/test_gptq_awq.py``); its serving path is the one an
asymmetric export takes with zero offsets (``test_quant_engine.py`` serves a symmetric export).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli_cache import quant_cli
from tests.engine.together import together

pytestmark = pytest.mark.timeout(1200)  # one test or fixture runs several engines, two at a time

CALIB_TOKENS = "256"
WINDOW = 256
ROUND_TRIP_TOL = 1e-4  # max |Δ logprob|, engine (torch_native attention) vs HF (sdpa), float32; seen 1.8e-5


@pytest.fixture(scope="module")
def exports(assets, tmp_path_factory) -> dict[str, Path]:
    """The calibrations run one after the other: they are compute-bound (two side by side took
    longer than in turn, measured), unlike an engine start. Through the suite's build cache
    (``tests/cli_cache.py``): run again only when the code or an input changed."""
    root, base = tmp_path_factory.mktemp("w4"), assets.smollm2
    awq, awq_w4, gptq_w4 = root / "awq", root / "awq-w4a16", root / "gptq-asym-w4a16"
    quant_cli(["calibrate", "--method", "awq", "--tokens", CALIB_TOKENS, "--model", base, "--out", awq], [base], [awq])
    quant_cli(["export", "--scheme", "w4a16", "--model", awq, "--out", awq_w4], [awq], [awq_w4])
    gptq = ["calibrate", "--method", "gptq", "--act-order", "--asym", "--tokens", CALIB_TOKENS]
    quant_cli([*gptq, "--model", base, "--out", gptq_w4], [base], [gptq_w4])
    return {"awq": awq_w4, "gptq-asym": gptq_w4}


@pytest.fixture(scope="module")
def window(assets) -> list[int]:
    from assets import eval_text
    from tools.quant.offline import token_ids

    return token_ids(assets.smollm2, eval_text(), WINDOW)


def served_logprobs(
    model_dir: Path, ids: list[int], scheme: str, dtype: str = "float32", npu_record: Path | None = None
) -> list[float]:
    """Prompt logprobs of ``ids`` from the engine, tokens 2..T; with ``npu_record``, as an NPU build
    (runtime_ext's NPU kernels over the strict torch_npu emulation, each distinct call recorded there)."""
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.quant.policy import QuantPolicy
    from tests.unit.runtime_ext import npu_recording

    env = {**os.environ, "INPUT_LOGPROBS": "1", **RuntimeExtConfig(quant_policy=QuantPolicy("w4a16")).to_env()}
    if npu_record is not None:
        env[npu_recording.ENV] = str(npu_record)
    script = Path(__file__).with_name("sglang_npu_record.py" if npu_record else "sglang_greedy.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), "1", json.dumps([ids]), "bf16", scheme, dtype],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("INPUT_LOGPROBS ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[0].split(" ", 1)[1])[0]


def ppl(logprobs: list[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs))


@torch.no_grad()
def offline_logprobs(export: Path, ids: list[int]) -> list[float]:
    from tools.quant.gptq import load_checkpoint
    from tools.quant.offline import log_probs

    lp = log_probs(load_checkpoint(export), ids, window=len(ids))[0]
    return lp.gather(1, torch.tensor(ids[1:]).unsqueeze(1))[:, 0].tolist()


@torch.no_grad()
def rtn_perplexity(model_dir: Path, ids: list[int]) -> float:
    from runtime_ext.quant.policy import QuantPolicy
    from tools.quant.offline import load_model, perplexity, quantize_model

    return perplexity(quantize_model(load_model(model_dir), QuantPolicy("w4a16")), ids, window=len(ids))


@pytest.fixture(scope="module")
def served(exports, window, tmp_path_factory) -> tuple[dict[str, list[float]], Path]:
    """The two exports served in float32, and the asymmetric one as an NPU build in bf16 (its calls
    recorded in the returned file): the three engine runs two at a time."""
    record = tmp_path_factory.mktemp("npu") / "calls.jsonl"
    jobs = {method: (lambda e=export: served_logprobs(e, window, "modelslim")) for method, export in exports.items()}
    jobs["npu"] = lambda: served_logprobs(exports["gptq-asym"], window, "modelslim", "bfloat16", record)
    return dict(zip(jobs, together(*jobs.values()))), record


def test_awq_and_gptq_beat_rtn_and_serve_like_offline(assets, exports, window, served):
    rtn = rtn_perplexity(assets.smollm2, window)
    report, served_ppl, diffs = [f"RTN {rtn:.3f}"], {}, {}
    for method, export in exports.items():
        served_lp = served[0][method]
        offline = offline_logprobs(export, window)
        served_ppl[method], diffs[method] = ppl(served_lp), max(abs(a - b) for a, b in zip(served_lp, offline))
        report.append(f"{method} served {ppl(served_lp):.3f} offline {ppl(offline):.3f} max|Δlp| {diffs[method]:.2e}")
    message = "W4A16 g128 held-out perplexity: " + "; ".join(report)
    print("\n" + message)
    for method in exports:
        assert served_ppl[method] < rtn, f"{method} is not below RTN. {message}"
        assert diffs[method] <= ROUND_TRIP_TOL, f"{method} served != offline. {message}"


def test_asymmetric_export_on_the_npu_path(exports, window, served):
    """The asymmetric export as an NPU build (bf16): every weight-only matmul passes its zero points as
    ``antiquant_offset`` (the scale's dtype and shape, msModelSlim's ``weight_offset`` negated), each
    recorded call keeps the documented contract, and the held-out perplexity is the offline one's (a
    wrong sign or a dropped offset multiplies it)."""
    from tests.unit.runtime_ext import npu_recording

    npu, record = ppl(served[0]["npu"]), served[1]
    offline = ppl(offline_logprobs(exports["gptq-asym"], window))
    calls = [r for r in npu_recording.load(record) if r["op"] == "npu_weight_quant_batchmatmul"]
    print(f"\nNPU build, bf16: perplexity {npu:.3f} (offline float32 {offline:.3f}); {len(calls)} distinct calls")
    assert calls, "no npu_weight_quant_batchmatmul call was made"
    for r in calls:
        assert r["kwargs"]["antiquant_offset"] == r["args"][2], r  # the scale's dtype and shape
        npu_recording.replay(r)  # raises ContractViolation on a broken rule
    assert abs(npu / offline - 1) < 0.05, (npu, offline)

"""C8 INT8 KV inside the real SGLang engine: C8-D (per-token scales; the tiny Qwen3 here, SmolLM2 in
tests/api/test_quality.py's server), C8-S (static per-channel scales from `structserve kv calibrate`
on real text; the tiny Qwen3) and C8-S with INT4 residuals for outlier vectors (both models).

Greedy agreement with the unquantized cache is reported, not asserted equal. What is
asserted: the engine serves with each int8 cache, and the logprobs of the common greedy
prefix differ from the float32 cache (so attention really read the quantized cache)
but only slightly. On the tiny Qwen3, a crafted outlier-heavy prompt (the tokens whose K/V the
calibrated scales clip most) is scored teacher-forced in each mode: with the residuals, the
logprobs are strictly closer to the unquantized cache's than with C8-S alone (several times
closer), so attention reads deq8 + deq4, not just the INT8 values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_ext.config import RuntimeExtConfig
from tests.engine.together import together

pytestmark = pytest.mark.timeout(1200)  # one test or fixture runs several engines, two at a time

N_TOKENS = 24
POOLS: dict[str, dict] = {}  # the last run's pool report per mode
PROMPTS = ["The history of the city begins", "def fibonacci(n):", "It is a truth universally acknowledged"]


def run(model_dir, prompt_ids, kv_cache, env=None) -> dict:
    script = Path(__file__).with_name("sglang_greedy.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(N_TOKENS), json.dumps(prompt_ids), kv_cache],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "INPUT_LOGPROBS": "1", **(env or {})},
    )
    found = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(("OUTPUT_IDS ", "LOGPROBS ", "INPUT_LOGPROBS ", "POOL "))
    }
    assert proc.returncode == 0 and len(found) == 4, proc.stderr[-3000:]
    POOLS[kv_cache] = found["POOL"]
    return found


def compare(label, ref, quant):
    """Greedy decoding of the PROMPTS: the logprobs of the common prefix differ, slightly."""
    agree, deltas = 0, []
    n = len(PROMPTS)
    for r_ids, r_lp, q_ids, q_lp in zip(
        ref["OUTPUT_IDS"][:n], ref["LOGPROBS"][:n], quant["OUTPUT_IDS"][:n], quant["LOGPROBS"][:n]
    ):
        assert len(q_ids) == N_TOKENS
        same = next((i for i, (a, b) in enumerate(zip(r_ids, q_ids)) if a != b), N_TOKENS)
        agree += same
        deltas += [abs(a - b) for a, b in zip(r_lp[:same], q_lp[:same])]
    print(
        f"\n{label}: greedy agreement {agree}/{N_TOKENS * n} tokens before the first "
        f"divergence; |Δ logprob| mean {sum(deltas) / len(deltas):.4f} max {max(deltas):.4f}"
    )
    assert max(deltas) > 0, "identical logprobs: the quantized cache was not read"
    assert max(deltas) < 0.5


def outlier_prompt(model_dir, calib, n: int = 32) -> list[int]:
    """The ``n`` tokens whose layer-0 V vectors (a function of the token alone) the calibrated
    static scales clip the most: every one of them is an outlier vector for C8-S."""
    import torch
    from transformers import AutoModelForCausalLM

    from runtime_ext.ops import kv_ref

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    layer = model.model.layers[0]
    with torch.no_grad():
        v = layer.self_attn.v_proj(layer.input_layernorm(model.model.embed_tokens.weight))
    v = v.view(v.shape[0], calib.kv_heads, calib.head_dim)
    scale = torch.tensor(calib.v_scale[0])
    eps = kv_ref.relative_error(v, kv_ref.dequantize_static(kv_ref.quantize_static(v, scale), scale, torch.float32))
    return eps.amax(dim=1).topk(n).indices.tolist()


def forced_error(ref: dict, quant: dict) -> float:
    """Mean |Δ logprob| vs the unquantized cache over the last prompt's teacher-forced tokens."""
    pairs = list(zip(ref["INPUT_LOGPROBS"][-1], quant["INPUT_LOGPROBS"][-1]))
    return sum(abs(a - b) for a, b in pairs) / len(pairs)


@pytest.mark.parametrize("model", ["qwen3_tiny", "smollm2"])
def test_c8_serves_and_tracks_the_unquantized_cache(assets, model, tmp_path):
    from transformers import AutoTokenizer

    from assets import calibration_text
    from tools.kv_calibrate import calibrate

    model_dir = getattr(assets, model)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    calib = tmp_path / "kv.json"
    # the static modes store unrotated by default (the outlier prompt is chosen in that space)
    calibration = calibrate(model_dir, calibration_text(), tokens=512)
    calibration.save(calib)
    if model == "qwen3_tiny":
        prompt_ids.append(outlier_prompt(model_dir, calibration))
    modes = ["bf16"]
    if model == "qwen3_tiny":  # SmolLM2 with C8-D: tests/api/test_quality.py's server (suite time)
        modes.append("c8_dynamic")
    # SmolLM2: C8-S alone is C8-S+R without its residuals (suite time)
    static_modes = ("c8_static", "c8_static_residual") if model == "qwen3_tiny" else ("c8_static_residual",)
    modes += static_modes
    static_env = RuntimeExtConfig(kv_calibration=calib).to_env()
    calls = [lambda m=m: run(model_dir, prompt_ids, m, env=static_env if m in static_modes else None) for m in modes]
    done = dict(zip(modes, together(*calls)))
    ref = done.pop("bf16")
    runs = {mode: done[mode] for mode in static_modes}
    if "c8_dynamic" in done:
        compare(f"{model} c8_dynamic (kv_rotation kv)", ref, done["c8_dynamic"])
    for mode, quant in runs.items():
        compare(f"{model} {mode}", ref, quant)
    residual = POOLS["c8_static_residual"]
    print(
        f"{model} residual: outlier rate {residual['outlier_rate']:.2%}, {residual['slots_used']}/"
        f"{residual['slots']} slots used, {residual['dropped']} dropped"
    )
    assert residual["vectors_stored"] > 0 and residual["slots"] > 0
    if model == "qwen3_tiny":  # the residual changes what attention reads
        errors = {mode: forced_error(ref, quant) for mode, quant in runs.items()}
        print(f"outlier prompt, teacher-forced |Δ logprob| mean: {errors}")
        assert residual["outliers"] > 0 and residual["dropped"] == 0
        assert 0 < errors["c8_static_residual"] < errors["c8_static"] / 4, errors
    if model == "smollm2":  # head_dim 64: what a fixed KV byte budget holds, from the pools as allocated
        ran = ("bf16", *static_modes)  # POOLS also holds the other model's runs
        per_token = {mode: POOLS[mode]["bytes"] / POOLS[mode]["tokens"] for mode in ran}
        bf16 = per_token.pop("bf16") / 2  # the unquantized run holds float32 values: 2 bytes each in bf16
        print({mode: f"{bf16 / size:.2f}x bf16 tokens" for mode, size in per_token.items()})
        assert len(per_token) == len(static_modes) and all(bf16 / size >= 1.9 for size in per_token.values())

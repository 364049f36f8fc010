"""C8-D (INT8 KV, per-token/head scales) inside the real SGLang engine on both models.

Greedy agreement with the unquantized cache is reported, not asserted equal. What is
asserted: the engine serves with the int8 cache, and the logprobs of the common greedy
prefix differ from the float32 cache (so attention really read the quantized cache)
but only slightly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

N_TOKENS = 24
PROMPTS = ["The history of the city begins", "def fibonacci(n):", "It is a truth universally acknowledged"]


def run(model_dir, prompt_ids, kv_cache):
    script = Path(__file__).with_name("sglang_greedy.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(N_TOKENS), json.dumps(prompt_ids), kv_cache],
        capture_output=True, text=True, timeout=600,
    )
    found = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
             for line in proc.stdout.splitlines() if line.startswith(("OUTPUT_IDS ", "LOGPROBS "))}
    assert proc.returncode == 0 and len(found) == 2, proc.stderr[-3000:]
    return found["OUTPUT_IDS"], found["LOGPROBS"]


@pytest.mark.parametrize("model", ["qwen3_tiny", "smollm2"])
def test_c8_dynamic_serves_and_tracks_the_unquantized_cache(assets, model):
    from transformers import AutoTokenizer

    model_dir = getattr(assets, model)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    ref_ids, ref_lp = run(model_dir, prompt_ids, "bf16")
    c8_ids, c8_lp = run(model_dir, prompt_ids, "c8_dynamic")
    agree, deltas = 0, []
    for r_ids, q_ids, r_lp, q_lp in zip(ref_ids, c8_ids, ref_lp, c8_lp):
        assert len(q_ids) == N_TOKENS
        same = next((i for i, (a, b) in enumerate(zip(r_ids, q_ids)) if a != b), N_TOKENS)
        agree += same
        deltas += [abs(a - b) for a, b in zip(r_lp[:same], q_lp[:same])]
    print(f"\n{model}: greedy agreement {agree}/{N_TOKENS * len(PROMPTS)} tokens before the first "
          f"divergence; |Δ logprob| mean {sum(deltas) / len(deltas):.4f} max {max(deltas):.4f}")
    assert max(deltas) > 0, "identical logprobs: the quantized cache was not read"
    assert max(deltas) < 0.5

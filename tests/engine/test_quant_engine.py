"""Quantized linear layers inside the real SGLang engine on SmolLM2 (bf16): W8A8 dynamic,
W8A16, W4A16 (g128, ragged last group at K=576), W8A8 with a layer kept in bf16, and
stage-aware W8A8. Each must still answer the capital of France, and the scheduler's own
counters show what ran (quantized/kept modules, INT8 vs dequantized-copy matmuls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

N_TOKENS = 12
KEEP = "model.layers.5.mlp.down_proj"
CASES = {  # name: (scheme, policy overrides)
    "w8a8_dynamic": ("w8a8_dynamic", {}),
    "w8a16": ("w8a16", {}),
    "w4a16": ("w4a16", {}),
    "w8a8+fallback": ("w8a8_dynamic", {"keep": [KEEP]}),
    "w8a8 stage-aware": ("w8a8_dynamic", {"stage_aware": True}),
}


def generate(model_dir: Path, ids: list[int], scheme: str, policy: dict) -> tuple[list[int], dict]:
    script = Path(__file__).with_name("sglang_greedy.py")
    env = {**os.environ, "STRUCTSERVE_QUANT": json.dumps({"scheme": scheme, "group_size": 128, "stage_aware": False,
                                                          "keep": [], **policy})}
    proc = subprocess.run([sys.executable, str(script), str(model_dir), str(N_TOKENS), json.dumps([ids]), "bf16",
                           scheme, "bfloat16"], capture_output=True, text=True, timeout=600, env=env)
    found = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
             for line in proc.stdout.splitlines() if line.startswith(("OUTPUT_IDS ", "QUANT "))}
    assert proc.returncode == 0 and len(found) == 2, proc.stderr[-3000:]
    return found["OUTPUT_IDS"][0], found["QUANT"]


@pytest.fixture(scope="module")
def prompt(assets):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(assets.smollm2))
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True, tokenize=False)
    return tok, tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("case", list(CASES))
def test_quantized_smollm2_still_answers(assets, prompt, case):
    tok, ids = prompt
    scheme, policy = CASES[case]
    out, stats = generate(assets.smollm2, ids, scheme, policy)
    text = tok.decode(out)
    print(f"\n{case}: {text!r} {stats}")
    assert "Paris" in text
    linear_modules = 30 * 4  # qkv, o, gate_up, down per layer
    kept = len(policy.get("keep", []))
    assert stats["quantized"] == linear_modules - kept and stats["kept"] == kept
    if scheme == "w8a8_dynamic" and policy.get("stage_aware"):
        assert stats["int8_calls"] == linear_modules  # prefill only; decode read the bf16 copy
        assert stats["copy_calls"] == linear_modules * (N_TOKENS - 1)
    elif scheme == "w8a8_dynamic":
        assert stats["int8_calls"] == (linear_modules - kept) * N_TOKENS and stats["copy_calls"] == 0
    else:
        assert stats["int8_calls"] == stats["copy_calls"] == 0

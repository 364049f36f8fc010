"""Quantized linear layers inside the real SGLang engine on SmolLM2 (bf16): W8A8 dynamic,
W8A16, W4A16 (g128, ragged last group at K=576). Each must still answer the capital of France,
and the scheduler's own counters show what ran (quantized modules, INT8 matmuls).

Then `structserve quant export` writes a W4A16 checkpoint in the msModelSlim layout; served
(structserve_modelslim), it gives exactly the tokens and logprobs of online quantization of the
same weights.

Covered elsewhere (to keep the suite's engine time down): a keep list, stage-aware W8A8 (its
INT8/copy counters) and a W8A8 export equal to online quantization in
``test_quant_recipe.py`` (float32) and ``test_npu_recorded_calls.py`` (fp16 stage-aware counters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.quant.policy import QuantPolicy
from tests.prompts import CAPITAL_MESSAGES

N_TOKENS = 12
CASES = {  # name: (scheme, policy overrides)
    "w8a8_dynamic": ("w8a8_dynamic", {}),
    "w8a16": ("w8a16", {}),
    "w4a16": ("w4a16", {}),
}


ONLINE: dict[str, tuple] = {}  # case -> (ids, logprobs) of the online runs


def generate(model_dir: Path, ids: list[int], scheme: str, policy: dict) -> tuple[list[int], dict]:
    script = Path(__file__).with_name("sglang_greedy.py")
    policy = {
        "scheme": scheme if scheme != "modelslim" else "w8a8_dynamic",
        "group_size": 128,
        "stage_aware": False,
        "keep": [],
        **policy,
    }  # (a modelslim checkpoint describes itself)
    env = {**os.environ, **RuntimeExtConfig(quant_policy=QuantPolicy.from_json(json.dumps(policy))).to_env()}
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(N_TOKENS), json.dumps([ids]), "bf16", scheme, "bfloat16"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    found = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(("OUTPUT_IDS ", "LOGPROBS ", "QUANT "))
    }
    assert proc.returncode == 0 and len(found) == 3, proc.stderr[-3000:]
    return found["OUTPUT_IDS"][0], found["QUANT"], found["LOGPROBS"][0]


@pytest.fixture(scope="module")
def prompt(assets):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(assets.smollm2))
    text = tok.apply_chat_template(CAPITAL_MESSAGES, add_generation_prompt=True, tokenize=False)
    return tok, tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("case", list(CASES))
def test_quantized_smollm2_still_answers(assets, prompt, case):
    tok, ids = prompt
    scheme, policy = CASES[case]
    out, stats, logprobs = generate(assets.smollm2, ids, scheme, policy)
    ONLINE[case] = (out, logprobs)
    text = tok.decode(out)
    print(f"\n{case}: {text!r} {stats}")
    assert "Paris" in text
    linear_modules = 30 * 4  # qkv, o, gate_up, down per layer
    assert stats["quantized"] == linear_modules and stats["kept"] == 0
    int8_calls = linear_modules * N_TOKENS if scheme == "w8a8_dynamic" else 0
    assert stats["int8_calls"] == int8_calls and stats["copy_calls"] == 0


@pytest.mark.parametrize("case", ["w4a16"])
def test_exported_checkpoint_serves_exactly_like_online_quantization(assets, prompt, case, tmp_path):
    from typer.testing import CliRunner

    from tools.cli import app

    if case not in ONLINE:  # run alone (-k): make the online reference here
        out, _, logprobs = generate(assets.smollm2, prompt[1], case, {})
        ONLINE[case] = (out, logprobs)
    out = tmp_path / case
    result = CliRunner().invoke(
        app, ["quant", "export", "--model", str(assets.smollm2), "--scheme", case, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    desc = json.loads((out / "quant_model_description.json").read_text())
    assert desc["model.layers.0.self_attn.q_proj.weight"] == {"w8a8_dynamic": "W8A8_DYNAMIC", "w4a16": "W4A16"}[case]
    assert desc["model.embed_tokens.weight"] == "FLOAT"
    ids, stats, logprobs = generate(out, prompt[1], "modelslim", {})
    assert stats["quantized"] == 120
    assert (ids, logprobs) == ONLINE[case]

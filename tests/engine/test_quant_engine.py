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
from tests.engine.together import together
from tests.prompts import CAPITAL_MESSAGES

pytestmark = pytest.mark.timeout(1200)  # one test or fixture runs several engines, two at a time

N_TOKENS = 12
CASES = {  # name: (scheme, policy overrides)
    "w8a8_dynamic": ("w8a8_dynamic", {}),
    "w8a16": ("w8a16", {}),
    "w4a16": ("w4a16", {}),
}
EXPORTED = "w4a16"  # the scheme `quant export` writes and the engine serves as msModelSlim


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


@pytest.fixture(scope="module")
def runs(assets, prompt, tmp_path_factory) -> dict[str, tuple]:
    """Each scheme quantized online, and the exported checkpoint served: name -> generate()'s result,
    the four engine runs two at a time."""
    from typer.testing import CliRunner

    from tools.cli import app

    out = tmp_path_factory.mktemp("export") / EXPORTED
    export = ["quant", "export", "--model", str(assets.smollm2), "--scheme", EXPORTED, "--out", str(out)]
    result = CliRunner().invoke(app, export)
    assert result.exit_code == 0, result.output
    jobs = {case: (assets.smollm2, *CASES[case]) for case in CASES} | {"export": (out, "modelslim", {})}
    done = together(*(lambda job=job: generate(job[0], prompt[1], job[1], job[2]) for job in jobs.values()))
    return dict(zip(jobs, done)) | {"export_dir": out}


@pytest.mark.parametrize("case", list(CASES))
def test_quantized_smollm2_still_answers(prompt, runs, case):
    tok, _ = prompt
    scheme, _ = CASES[case]
    out, stats, _ = runs[case]
    text = tok.decode(out)
    print(f"\n{case}: {text!r} {stats}")
    assert "Paris" in text
    linear_modules = 30 * 4  # qkv, o, gate_up, down per layer
    assert stats["quantized"] == linear_modules and stats["kept"] == 0
    int8_calls = linear_modules * N_TOKENS if scheme == "w8a8_dynamic" else 0
    assert stats["int8_calls"] == int8_calls and stats["copy_calls"] == 0


def test_exported_checkpoint_serves_exactly_like_online_quantization(runs):
    desc = json.loads((runs["export_dir"] / "quant_model_description.json").read_text())
    assert desc["model.layers.0.self_attn.q_proj.weight"] == "W4A16"
    assert desc["model.embed_tokens.weight"] == "FLOAT"
    ids, stats, logprobs = runs["export"]
    assert stats["quantized"] == 120
    online_ids, _, online_logprobs = runs[EXPORTED]
    assert (ids, logprobs) == (online_ids, online_logprobs)

"""SGLang's greedy tokens equal HF transformers' greedy tokens, in float32 so that no
near-tie can flip an argmax. Runs the real engine in-process on the real models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.together import together

N_TOKENS = 24
PROMPTS = ["The history of the city begins", "def fibonacci(n):", "What is the capital of France?"]


def hf_greedy(model_dir, prompt_ids):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    outs = []
    with torch.no_grad():  # plain argmax loop: EOS is just another token, as with ignore_eos
        for ids in prompt_ids:
            seq = list(ids)
            for _ in range(N_TOKENS):
                logits = model(torch.tensor([seq])).logits[0, -1]
                seq.append(int(torch.argmax(logits)))
            outs.append(seq[len(ids) :])
    return outs


def sglang_greedy(model_dir, prompt_ids):
    script = Path(__file__).with_name("sglang_greedy.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(N_TOKENS), json.dumps([list(p) for p in prompt_ids])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("OUTPUT_IDS ")), None)
    assert line, f"engine run failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(line[len("OUTPUT_IDS ") :])


ASSETS = ("qwen3_tiny", "smollm2")


@pytest.fixture(scope="module")
def prompts(assets) -> dict[str, list[list[int]]]:
    from transformers import AutoTokenizer

    return {
        asset: [AutoTokenizer.from_pretrained(str(getattr(assets, asset))).encode(p) for p in PROMPTS]
        for asset in ASSETS
    }


@pytest.fixture(scope="module")
def served(assets, prompts) -> dict[str, list[list[int]]]:
    """Both models' engine runs side by side."""
    runs = together(*(lambda a=a: sglang_greedy(getattr(assets, a), prompts[a]) for a in ASSETS))
    return dict(zip(ASSETS, runs))


@pytest.mark.parametrize("asset", ASSETS)
def test_sglang_greedy_equals_transformers(assets, prompts, served, asset):
    expected = hf_greedy(getattr(assets, asset), prompts[asset])
    got = served[asset]
    assert [len(g) for g in got] == [N_TOKENS] * len(PROMPTS)
    assert got == expected

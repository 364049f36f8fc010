"""SGLang's greedy tokens equal HF transformers' greedy tokens, in float32 so that no
near-tie can flip an argmax. Runs the real engine in-process on the real models."""

from __future__ import annotations

import pytest

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
            outs.append(seq[len(ids):])
    return outs


def sglang_greedy(model_dir, prompt_ids):
    from service.engine import EngineOptions, prepare_process_env

    prepare_process_env("cpu")
    import sglang

    options = EngineOptions(model_path=model_dir, dtype="float32", max_total_tokens=4096, page_size=1)
    engine = sglang.Engine(**options.engine_kwargs())
    try:
        params = {"temperature": 0, "max_new_tokens": N_TOKENS, "ignore_eos": True}
        outs = engine.generate(input_ids=[list(p) for p in prompt_ids], sampling_params=params)
        return [o["output_ids"] for o in outs]
    finally:
        engine.shutdown()


@pytest.mark.parametrize("asset", ["qwen3_tiny", "smollm2"])
def test_sglang_greedy_equals_transformers(assets, asset):
    from transformers import AutoTokenizer

    model_dir = getattr(assets, asset)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompt_ids = [tok.encode(p) for p in PROMPTS]
    expected = hf_greedy(model_dir, prompt_ids)
    got = sglang_greedy(model_dir, prompt_ids)
    assert [len(g) for g in got] == [N_TOKENS] * len(PROMPTS)
    assert got == expected

"""HF transformers ``generate`` on the serve-overhead prompts: the no-server baseline.

Same model, dtype and prompts (through the model's chat template) as the servers in
``bench/serve_overhead.py``; requests run in batches of ``concurrency`` (left padding,
greedy, ``max_new_tokens``). TTFT of a request = time from its batch's start to the first
generated token (the first call of a logits processor, which runs right after the prefill
forward); tokens = generated tokens up to and including EOS; prompt tokens = the unpadded
templated prompt; text = the generated tokens up to EOS, decoded without special tokens (what a
server streams as content).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

_LOADED: dict[Path, Any] = {}


def _load(model_dir: Path) -> tuple[Any, Any]:
    if model_dir not in _LOADED:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
        _LOADED[model_dir] = (tok, model)
    return _LOADED[model_dir]


class _FirstCall:
    """Logits processor that records when it is first called (= first token's logits ready)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.at is None:
            self.at = time.perf_counter()
        return scores


def _batch(tok: Any, model: Any, prompts: list[str], max_tokens: int) -> tuple[float, int, int, list[str]]:
    """One batch: (seconds to the first token, generated tokens, prompt tokens, completion texts)."""
    import torch
    from transformers import LogitsProcessorList

    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)  # the template has them
    first = _FirstCall()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=max_tokens,
            logits_processor=LogitsProcessorList([first]),
            pad_token_id=tok.pad_token_id,
        )
    new = out[:, enc["input_ids"].shape[1] :]
    tokens, texts = 0, []
    for row in new.tolist():
        n = len(row)
        if tok.eos_token_id in row:
            n = row.index(tok.eos_token_id) + 1
        tokens += n
        texts.append(tok.decode(row[:n], skip_special_tokens=True))
    prompt_tokens = int(enc["attention_mask"].sum())
    return (first.at or time.perf_counter()) - t0, tokens, prompt_tokens, texts


def hf_level(
    model_dir: Path, prompts: list[str], concurrency: int, max_tokens: int
) -> tuple[list[float], int, float, int, list[str]]:
    """All ``prompts`` in batches of ``concurrency``, after one untimed warm-up batch: (TTFT per
    request, generated tokens, wall seconds, prompt tokens, completion text per prompt)."""
    tok, model = _load(model_dir)
    _batch(tok, model, prompts[:concurrency], max_tokens)
    ttfts, tokens, prompt_tokens, texts = [], 0, 0, []
    t0 = time.perf_counter()
    for i in tqdm(range(0, len(prompts), concurrency), desc=f"HF generate, batch {concurrency}", leave=False):
        chunk = prompts[i : i + concurrency]
        ttft, n, n_prompt, chunk_texts = _batch(tok, model, chunk, max_tokens)
        ttfts += [ttft] * len(chunk)
        tokens, prompt_tokens, texts = tokens + n, prompt_tokens + n_prompt, texts + chunk_texts
    return ttfts, tokens, time.perf_counter() - t0, prompt_tokens, texts

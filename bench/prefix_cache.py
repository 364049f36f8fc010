"""Prefix-cache hits vs misses on SmolLM2 (bf16): time to first token on a long shared prompt.

Workload: a system prompt of ``--prefix`` tokens of real text (Persuasion) followed by distinct
short questions. For each attention implementation (SGLang's upstream ``torch_native``, and
runtime_ext's, which on extend attends only the new queries against the cached K/V), an
in-process ``sglang.Engine`` with SGLang's default radix cache (page size 16):

- miss: the radix cache is flushed before each request, so the whole prompt is prefilled;
- hit: the shared prefix was served before; only the question is prefilled.

TTFT = wall time of a 1-token generation (the engine's own first-token latency; no HTTP).
Medians over ``--rounds`` requests, miss and hit alternating.

    .venv/bin/python bench/prefix_cache.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
IMPLS = ("sglang", "structserve")


def prompts(model: Path, prefix_tokens: int, n: int) -> tuple[list[int], list[list[int]]]:
    from transformers import AutoTokenizer

    from assets import eval_text

    tok = AutoTokenizer.from_pretrained(str(model))
    shared = tok.encode(eval_text()[: prefix_tokens * 8], add_special_tokens=False)[:prefix_tokens]
    questions = [
        tok.encode(f"\nQuestion {i}: who wrote this, and why does {w} matter?", add_special_tokens=False)
        for i, w in enumerate(["Anne", "Bath", "the navy", "Lyme", "Kellynch", "the letter"] * n)
    ][:n]
    return shared, questions


def ttft(engine, ids: list[int]) -> float:
    start = time.perf_counter()
    engine.generate(input_ids=[ids], sampling_params={"max_new_tokens": 1, "temperature": 0})
    return time.perf_counter() - start


def run(model: Path, impl: str, shared: list[int], questions: list[list[int]]) -> dict:
    from runtime_ext.config import RuntimeExtConfig
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    replace(RuntimeExtConfig.from_env(), attention=impl).export()  # read by the plugin in the scheduler process
    import sglang

    engine = sglang.Engine(
        **EngineOptions(
            model_path=model, dtype="bfloat16", engine=EngineSettings(max_total_tokens=16384)
        ).engine_kwargs()
    )
    try:
        ttft(engine, shared[:64])  # warm-up
        miss, hit = [], []
        for q in questions:
            engine.flush_cache()
            miss.append(ttft(engine, shared + q))
            hit.append(ttft(engine, shared + q[::-1]))  # same prefix, different tail
        return {"miss": statistics.median(miss), "hit": statistics.median(hit)}
    finally:
        engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    from assets import fetch

    model = fetch(["smollm2", "austen"]).smollm2
    shared, questions = prompts(model, args.prefix, args.rounds)
    results = {impl: run(model, impl, shared, questions) for impl in IMPLS}
    table = Table(
        title=f"TTFT, {model.name}: {len(shared)}-token shared prefix + a short question (median of {args.rounds})"
    )
    for col in ("attention", "miss (s)", "hit (s)", "hit speed-up"):
        table.add_column(col, justify="right")
    for impl, r in results.items():
        table.add_row(impl, f"{r['miss']:.3f}", f"{r['hit']:.3f}", f"{r['miss'] / r['hit']:.1f}×")
    Console(width=160).print(table)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""Prefix caches on two workloads, SmolLM2 (bf16, runtime_ext attention, 16-token pages).

Workloads (real text, Persuasion):
- ``shared``: a ~1,000-token system prompt, then distinct short questions;
- ``multi-turn``: 4 chats interleaved round-robin, 6 turns each; every turn sends the whole
  history (a ~300-token system prompt, earlier questions and ~60-token answers) plus a new question.

Caches: off, SGLang's default radix cache, runtime_ext's combined-block cache with C = 1, 4, 8.
Per cache, one in-process ``sglang.Engine``; requests one after another. Reported: hit rate
(cached / prompt tokens, from the engine's ``cached_tokens``), TTFT (wall time of a 1-token
generation) median and total over requests after the first of each chat, speed-up of that total
vs cache off, pages abandoned because their unit was incomplete. Also the memory that page sizes
1 / 16 / 64 waste in partly filled last pages on these requests' lengths (prompt + a 60-token answer).

    .venv/bin/python bench/prefix_workloads.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHES = (
    ("off", "off", 1),
    ("sglang", "sglang", 1),
    ("combined C=1", "combined", 1),
    ("combined C=4", "combined", 4),
    ("combined C=8", "combined", 8),
)
ANSWER = 60


def workloads(model: Path) -> dict[str, list[tuple[bool, list[int]]]]:
    """name -> [(may hit: not the first request of its chat, prompt ids)] in serving order."""
    from transformers import AutoTokenizer

    from assets import eval_text

    tok = AutoTokenizer.from_pretrained(str(model))
    words = tok.encode(eval_text()[:40000], add_special_tokens=False)
    question = lambda i: tok.encode(f"\nQuestion {i}: what happens next, and why?\n", add_special_tokens=False)  # noqa: E731
    shared = [(i > 0, words[:1000] + question(i)) for i in range(16)]
    chats, multi = [words[2000 + 400 * c : 2300 + 400 * c] for c in range(4)], []
    for turn in range(6):
        for c in range(4):
            chats[c] = chats[c] + question(10 * c + turn)
            multi.append((turn > 0, list(chats[c])))
            start = 5000 + 500 * c + ANSWER * turn
            chats[c] = chats[c] + words[start : start + ANSWER]  # the "answer" joins the history
    return {"shared": shared, "multi-turn": multi}


def serve(model: Path, backend: str, combine: int, requests: list[tuple[bool, list[int]]]) -> dict:
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.plugin import INTERNAL_STATE_KEY
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    replace(RuntimeExtConfig.from_env(), combine_blocks=combine).export()  # read by the scheduler it spawns
    import sglang

    engine = sglang.Engine(
        **EngineOptions(
            model_path=model, dtype="bfloat16", engine=EngineSettings(max_total_tokens=16384), prefix_cache=backend
        ).engine_kwargs()
    )
    try:
        engine.generate(input_ids=[[1, 2, 3]], sampling_params={"max_new_tokens": 1})  # warm-up
        cached = prompt = 0
        later = []
        for may_hit, ids in requests:
            start = time.perf_counter()
            out = engine.generate(input_ids=[ids], sampling_params={"max_new_tokens": 1, "temperature": 0})[0]
            elapsed = time.perf_counter() - start
            cached, prompt = cached + out["meta_info"].get("cached_tokens", 0), prompt + len(ids)
            if may_hit:
                later.append(elapsed)
        report = engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]["prefix_cache"]
        return {
            "hit_rate": cached / prompt,
            "p50": statistics.median(later),
            "total": sum(later),
            "abandoned": report.get("abandoned_pages", 0) if backend == "combined" else 0,
        }
    finally:
        engine.shutdown()


def waste(lengths: list[int], page: int) -> float:
    allocated = sum(-(-n // page) * page for n in lengths)
    return (allocated - sum(lengths)) / allocated


def main() -> None:
    from assets import fetch

    model = fetch(["smollm2", "austen"]).smollm2
    loads = workloads(model)
    runs = [
        (w, label, serve(model, backend, combine, reqs))
        for w, reqs in loads.items()
        for label, backend, combine in track(CACHES, description=f"caches ({w})")
    ]
    table = Table(title=f"Prefix caches on {model.name} (bf16, 16-token pages); TTFT over requests that can hit")
    for col in ("workload", "cache", "hit rate", "TTFT p50 (s)", "TTFT total (s)", "vs off", "abandoned pages"):
        table.add_column(col, justify="right")
    for w, label, r in runs:
        off = next(x for ww, ll, x in runs if ww == w and ll == "off")
        table.add_row(
            w,
            label,
            f"{r['hit_rate']:.1%}",
            f"{r['p50']:.3f}",
            f"{r['total']:.2f}",
            f"{off['total'] / r['total']:.1f}×",
            str(r["abandoned"]),
        )
    pages = Table(title="Memory in partly filled last pages (prompt + 60-token answer)")
    for col in ("workload", "page 1", "page 16", "page 64"):
        pages.add_column(col, justify="right")
    for w, reqs in loads.items():
        lengths = [len(ids) + ANSWER for _, ids in reqs]
        pages.add_row(w, *(f"{waste(lengths, p):.2%}" for p in (1, 16, 64)))
    console = Console(width=160)
    console.print(table)
    console.print(pages)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

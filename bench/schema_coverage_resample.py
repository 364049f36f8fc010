"""The latency cost of validate-and-resample, on SmolLM2: one structserve server, the same
request with a schema whose grammar is exact (three distinct-or-not integers 1..3) and with the
same schema plus ``uniqueItems`` (loosened: the grammar drops it, the output is validated and
resampled up to ``grammar.resample_attempts`` more times). Sequential requests, seeds 0..N-1,
temperature 1.

    .venv/bin/python bench/schema_coverage_resample.py --requests 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from servers import launch, stop  # noqa: E402

EXACT = {"type": "array", "items": {"type": "integer", "enum": [1, 2, 3]}, "minItems": 3, "maxItems": 3}
LOOSE = {**EXACT, "uniqueItems": True}
PROMPT = "Write three numbers, each 1, 2 or 3, as a JSON array."


def ask(
    client: httpx.Client, model: str, schema: dict[str, Any], seed: int, loosen: bool
) -> tuple[float, dict[str, Any]]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "three", "schema": schema}},
        "temperature": 1.0,
        "seed": seed,
        "max_tokens": 24,
        **({"allow_schema_loosening": True} if loosen else {}),
    }
    began = time.perf_counter()
    resp = client.post("/v1/chat/completions", json=body, timeout=300)
    resp.raise_for_status()
    return time.perf_counter() - began, resp.json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--port", type=int, default=18431)
    parser.add_argument("--url", default=None, help="a running structserve on SmolLM2 instead of starting one")
    args = parser.parse_args()
    from assets import model_dir

    proc = None if args.url else launch("structserve", model_dir("smollm2"), args.port)
    rows: dict[str, list[tuple[float, dict[str, Any]]]] = {"exact grammar": [], "uniqueItems, resampled": []}
    try:
        with httpx.Client(base_url=args.url or f"http://127.0.0.1:{args.port}") as client:
            model = client.get("/v1/models").json()["data"][0]["id"]
            ask(client, model, LOOSE, 999, True)  # warm both grammars
            ask(client, model, EXACT, 999, False)
            for seed in tqdm(range(args.requests), desc="requests"):
                rows["exact grammar"].append(ask(client, model, EXACT, seed, False))
                rows["uniqueItems, resampled"].append(ask(client, model, LOOSE, seed, True))
    finally:
        if proc is not None:
            stop(proc)
    table = Table(title=f"SmolLM2, {args.requests} sequential requests each, temperature 1, max_tokens 24")
    for col in ("schema", "latency p50 s", "latency mean s", "latency max s", "attempts mean", "valid outputs"):
        table.add_column(col, justify="right")
    for name, results in rows.items():
        seconds = [s for s, _ in results]
        attempts = [r["usage"].get("schema_attempts") or 1 for _, r in results]
        valid = sum(len(set(json.loads(r["choices"][0]["message"]["content"]))) == 3 for _, r in results)
        table.add_row(
            name,
            f"{statistics.median(seconds):.2f}",
            f"{statistics.fmean(seconds):.2f}",
            f"{max(seconds):.2f}",
            f"{statistics.fmean(attempts):.2f}",
            f"{valid}/{len(results)} unique",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()

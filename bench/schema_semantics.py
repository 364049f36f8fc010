"""What ``grammar.json_schema_semantics`` does to a model's answers: the JSON-schema corpus of the
API tests (``tests/data/json_schemas.json``, schemas as applications write them) on SmolLM2, one
server per mode (``exact``, the default, and ``strict``), the same prompts, greedy, one request at
a time (so batching cannot change the outputs). Per mode: outputs finished within ``max_tokens``,
finished outputs valid against the schema, outputs holding a member the schema does not declare,
completion tokens.

    .venv/bin/python bench/schema_semantics.py --max-tokens 192 --every 2   # the API test's half
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from servers import launch, stop  # noqa: E402

CORPUS = json.loads((ROOT / "tests" / "data" / "json_schemas.json").read_text())
MODES = {"exact": "structserve", "strict": "structserve strict"}


def undeclared(value: Any, schema: Any) -> int:
    """Members of ``value``'s objects that the matching ``properties`` do not declare (a schema
    with ``additionalProperties``/``patternProperties`` counts none), recursively."""
    if not isinstance(schema, dict):
        return 0
    if isinstance(value, dict):
        props = schema.get("properties", {})
        open_ = "additionalProperties" in schema or "patternProperties" in schema
        own = 0 if open_ or not props else sum(1 for k in value if k not in props)
        return own + sum(undeclared(v, props.get(k)) for k, v in value.items())
    if isinstance(value, list):
        return sum(undeclared(v, schema.get("items")) for v in value)
    return 0


def prompt(name: str) -> str:
    """The prompt the corpus' engine test used (the record's name as the request)."""
    return f"Give one example {name.replace('_', ' ')} as JSON."


def run(base: str, corpus: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    out = []
    with httpx.Client(base_url=base, timeout=600) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        for entry in tqdm(corpus, desc=base):
            fmt = {"type": "json_schema", "json_schema": {"name": entry["name"], "schema": entry["schema"]}}
            body = {
                "model": model,
                "messages": [
                    {"role": "user", "content": f"Give one example {entry['name'].replace('_', ' ')} as JSON."}
                ],
                "response_format": fmt,
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            resp = client.post("/v1/chat/completions", json=body)
            resp.raise_for_status()
            choice, usage = resp.json()["choices"][0], resp.json()["usage"]
            out.append(
                {
                    "name": entry["name"],
                    "schema": entry["schema"],
                    "choice": choice,
                    "tokens": usage["completion_tokens"],
                }
            )
    return out


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    finished = [r for r in results if r["choice"]["finish_reason"] == "stop"]
    parsed = [(r, json.loads(r["choice"]["message"]["content"])) for r in finished]
    valid = sum(Draft202012Validator(r["schema"]).is_valid(v) for r, v in parsed)
    extra = sum(1 for r, v in parsed if undeclared(v, r["schema"]))
    return {
        "finished": len(finished),
        "valid": valid,
        "with undeclared members": extra,
        "tokens mean": statistics.mean(r["tokens"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--port", type=int, default=18441)
    parser.add_argument("--every", type=int, default=1, help="every N-th schema of the corpus")
    args = parser.parse_args()
    corpus = CORPUS[:: args.every]
    from assets import model_dir

    rows = {}
    for mode, server in MODES.items():
        proc = launch(server, model_dir("smollm2"), args.port)
        try:
            rows[mode] = run(f"http://127.0.0.1:{args.port}", corpus, args.max_tokens)
        finally:
            stop(proc)
    table = Table(title=f"SmolLM2, {len(corpus)} schemas, greedy, one at a time, max_tokens {args.max_tokens}")
    for col in (
        "semantics",
        "finished",
        "finished valid",
        "finished with undeclared members",
        "completion tokens mean",
    ):
        table.add_column(col, justify="right")
    for mode, results in rows.items():
        s = summary(results)
        table.add_row(mode, f"{s['finished']}/{len(corpus)}", f"{s['valid']}/{s['finished']}",
                      str(s["with undeclared members"]), f"{s['tokens mean']:.0f}")  # fmt: skip
    same = sum(a["choice"]["message"]["content"] == b["choice"]["message"]["content"] for a, b in zip(*rows.values()))
    Console().print(table)
    print(f"identical outputs in both modes: {same}/{len(corpus)}")


if __name__ == "__main__":
    main()

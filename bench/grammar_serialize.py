"""Why a compiled grammar is not handed from the service's worker to SGLang.

For each grammar: xgrammar compile time (the service's settings: ``grammars.compile.xgrammar_calls``),
``CompiledGrammar.serialize_json`` time and size, ``deserialize_json`` time, and the compiled
grammar's own memory size. Then where a cold tool-call grammar spends its time: each distinct
tool schema compiled alone, and bare strings with the keywords that dominate.

    .venv/bin/python bench/grammar_serialize.py                 # tools 4 and 16 (64 exhausts 24 GiB)
    .venv/bin/python bench/grammar_serialize.py --tools 4 8
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

STRINGS = {
    "string maxLength 200": {"type": "string", "maxLength": 200},
    "string maxLength 20": {"type": "string", "maxLength": 20},
    "string minLength 1": {"type": "string", "minLength": 1},
    "string format date-time": {"type": "string", "format": "date-time"},
    "string format email": {"type": "string", "format": "email"},
}


def timed(fn):
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def serialize_rows(compiler, tools: list[int]) -> list[tuple]:
    from structured_overhead import DATA, _many_tools
    from xgrammar import CompiledGrammar

    from grammars.compile import compile_text
    from grammars.json_schema import check_schema
    from grammars.tool_calls import tool_call_constraint

    corpus = {e["name"]: e["schema"] for e in json.loads((DATA / "json_schemas.json").read_text())}
    cases = [
        (f"schema {n}", "json_schema", check_schema(corpus[n]).canonical)
        for n in ("support_ticket_classification", "invoice")
    ]
    cases += [
        (f"{n} tools, qwen, required", "structural_tag", tool_call_constraint("qwen", _many_tools(n), "required").value)
        for n in tools
    ]
    rows = []
    for label, kind, text in tqdm(cases, desc="serialize"):
        compiled, t_compile = timed(lambda: compile_text(compiler, kind, text))
        serialized, t_ser = timed(compiled.serialize_json)
        _, t_de = timed(lambda: CompiledGrammar.deserialize_json(serialized, compiled.tokenizer_info))
        rows.append((label, t_compile, t_ser, len(serialized), t_de, compiled.memory_size_bytes))
    return rows


def breakdown_rows(compiler, n_tools: int) -> list[tuple[str, float]]:
    from structured_overhead import _many_tools

    from grammars.compile import compile_text
    from grammars.tool_calls import tool_call_constraint

    distinct = {json.dumps(t.parameters, sort_keys=True): t for t in _many_tools(n_tools)}
    rows = []
    for tool in tqdm(distinct.values(), desc="one tool at a time"):
        tag = tool_call_constraint("qwen", [tool], "required").value
        rows.append((f"tool {tool.name}", timed(lambda: compile_text(compiler, "structural_tag", tag))[1]))
    rows.sort(key=lambda r: -r[1])
    strings = [(k, timed(lambda: compile_text(compiler, "json_schema", json.dumps(v)))[1]) for k, v in STRINGS.items()]
    return [(f"all {len(rows)} distinct tools, sum", sum(t for _, t in rows)), *rows[:8], *strings]


def main() -> None:
    from assets import model_dir
    from grammars.compile import load_compiler

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", type=int, nargs="+", default=[4, 16], help="tool-set sizes to serialize")
    parser.add_argument("--breakdown-tools", type=int, default=64)
    args = parser.parse_args()
    model = model_dir("smollm2")
    _, compiler = load_compiler(model)
    console = Console(width=150)
    t = Table(title=f"xgrammar serialize_json ({model.name} tokenizer, service settings)")
    for col in ("grammar", "compile s", "serialize s", "JSON MB", "deserialize s", "in memory MB"):
        t.add_column(col, justify="right")
    for label, tc, ts, size, td, mem in serialize_rows(compiler, args.tools):
        t.add_row(label, f"{tc:.3f}", f"{ts:.3f}", f"{size / 1e6:.1f}", f"{td:.3f}", f"{mem / 1e6:.2f}")
    console.print(t)
    b = Table(title=f"cold compile of the {args.breakdown_tools}-tool set, by part")
    b.add_column("grammar")
    b.add_column("compile s", justify="right")
    for label, sec in breakdown_rows(compiler, args.breakdown_tools):
        b.add_row(label, f"{sec:.3f}")
    console.print(b)


if __name__ == "__main__":
    main()

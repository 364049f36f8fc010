"""Structured-generation overhead: constrained vs free decoding, and grammar compile cost.

1. Decode: ``structserve serve`` on SmolLM2 (real engine, HTTP, streamed). The same
   greedy prompt, free vs ``response_format: json_schema`` (a string with ``minLength``
   so both run to exactly ``max_tokens``), alternating, several rounds, at concurrency
   1 and 8. Per-token decode time = (last chunk - first chunk) / (tokens - 1). One server per
   ``--backends`` entry (``grammar.backend``: llguidance, the default, or xgrammar).
2. Compile: ``grammars.compile.compiler.GrammarCompiler`` (the service's bounded compiler, same
   xgrammar settings as SGLang) over the 37 test schemas: cold compile, then the cached
   lookup; and the tool-call grammar for 64 tools (qwen and generic formats).
3. ``--engine``: decode 1 again without HTTP or the service (an in-process ``sglang.Engine``,
   batch = concurrency), to separate the scheduler's grammar cost from the serving path's; each
   schema as xgrammar's ``json_schema`` and as the llguidance Lark the service's route sends.

    .venv/bin/python bench/structured_overhead.py
    .venv/bin/python bench/structured_overhead.py --rounds 3 --max-tokens 96 --skip-decode
    .venv/bin/python bench/structured_overhead.py --rounds 8 --tools 4 --engine   # + the engine alone
    .venv/bin/python bench/structured_overhead.py --tools 4 --backends xgrammar llguidance
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server import ServerProcess  # noqa: E402

DATA = ROOT / "tests" / "data"
PROMPT = "Write a very long story about a lighthouse keeper and a storm. Do not stop early."
LONG_STRING = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 1500}},
    "required": ["story"],
    "additionalProperties": False,
}


async def one_stream(
    client: httpx.AsyncClient, server: ServerProcess, max_tokens: int, constrained: bool
) -> tuple[float, int]:
    body = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "story", "schema": LONG_STRING}}
    first = last = None
    tokens = 0
    async with client.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
    return (last - first) / max(tokens - 1, 1), tokens


async def decode_round(
    server: ServerProcess, conc: int, max_tokens: int, constrained: bool
) -> tuple[list[float], set[int]]:
    async with httpx.AsyncClient(timeout=600) as client:
        results = await asyncio.gather(*(one_stream(client, server, max_tokens, constrained) for _ in range(conc)))
    return [r[0] for r in results], {r[1] for r in results}


def decode_table(model: Path, rounds: int, max_tokens: int, concurrency: list[int], backend: str) -> Table:
    env = {"STRUCTSERVE_GRAMMAR__BACKEND": backend}
    server = ServerProcess(model, name=f"bench-structured-{backend}", env=env)
    server.start()
    table = Table(
        title=f"decode per token: free vs json_schema, {model.name}, {max_tokens} tokens, greedy, "
        f"{rounds} alternating rounds, grammar.backend {backend}"
    )
    for col in ("conc", "free ms/token (median)", "json_schema ms/token (median)", "overhead", "output tokens"):
        table.add_column(col, justify="right")
    try:
        asyncio.run(decode_round(server, 1, 8, True))  # warm up: compile, caches
        for conc in concurrency:
            times: dict[bool, list[float]] = {False: [], True: []}
            lengths: set[int] = set()
            for r in tqdm(range(rounds), desc=f"decode c={conc}"):
                for constrained in (False, True) if r % 2 == 0 else (True, False):
                    per_token, lens = asyncio.run(decode_round(server, conc, max_tokens, constrained))
                    times[constrained] += per_token
                    lengths |= lens
            free, json_ = statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3
            table.add_row(
                str(conc),
                f"{free:.2f}",
                f"{json_:.2f}",
                f"{(json_ / free - 1) * 100:+.1f}%",
                "/".join(str(n) for n in sorted(lengths)),
            )
    finally:
        server.stop()
    return table


ENGINE_SCHEMAS = {  # the counted string of the HTTP bench, and the same object without the count
    "story, minLength 1500": LONG_STRING,
    "story, no minLength": {**LONG_STRING, "properties": {"story": {"type": "string"}}},
}


def _engine_constraints() -> dict[str, tuple[str, str]]:
    """Per schema, as SGLang's xgrammar gets it (``json_schema``) and as the service's llguidance
    route sends it (``ebnf``: the Lark grammar ``runtime_ext.grammar_route`` hands to llguidance)."""
    from grammars.compile import json_schema_to_lark

    out = {}
    for name, schema in ENGINE_SCHEMAS.items():
        out[f"{name}, xgrammar"] = ("json_schema", json.dumps(schema))
        out[f"{name}, llguidance"] = ("ebnf", json_schema_to_lark(schema))
    return out


def engine_table(model: Path, rounds: int, max_tokens: int, concurrency: list[int]) -> Table:
    """The same comparison without HTTP or the service: an in-process ``sglang.Engine`` with the
    service's engine settings, batch = concurrency, distinct chat-templated prompts (so the model
    writes prose, as over HTTP), ``ignore_eos``; ms per step (wall / tokens). Two schemas: the
    HTTP bench's counted string and the same string without ``minLength``."""
    from transformers import AutoTokenizer

    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    prepare_process_env("cpu")
    import sglang

    tok = AutoTokenizer.from_pretrained(str(model))
    engine = sglang.Engine(**EngineOptions(model_path=model, dtype="bfloat16", engine=EngineSettings()).engine_kwargs())
    table = Table(title=f"engine only (no HTTP): ms per decode step, free vs json_schema, {rounds} alternating rounds")
    for col in ("batch", "schema", "free ms/step (median)", "json_schema ms/step (median)", "overhead"):
        table.add_column(col, justify="right")
    base = {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    try:
        for batch in concurrency:
            chats = [[{"role": "user", "content": f"{PROMPT} ({i})"}] for i in range(batch)]
            prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
            for name, (key, grammar) in _engine_constraints().items():
                constrained = {**base, key: grammar}
                engine.generate(prompts[:1], {**constrained, "max_new_tokens": 4})  # compile, caches
                times: dict[bool, list[float]] = {False: [], True: []}
                for r in tqdm(range(rounds), desc=f"engine batch {batch}, {name}"):
                    for c in (False, True) if r % 2 == 0 else (True, False):
                        times[c].append(
                            _timed(lambda: engine.generate(prompts, constrained if c else base)) / max_tokens
                        )
                free, json_ = statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3
                table.add_row(str(batch), name, f"{free:.2f}", f"{json_:.2f}", f"{(json_ / free - 1) * 100:+.1f}%")
    finally:
        engine.shutdown()
    return table


def _many_tools(n: int) -> list:
    from grammars.tool_calls import ToolSpec

    tools = json.loads((DATA / "tools.json").read_text())
    specs = []
    for i in range(n):
        fn = tools[i % len(tools)]["function"]
        specs.append(ToolSpec(fn["name"] if i < len(tools) else f"{fn['name']}_{i}", fn.get("parameters")))
    return specs


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compile_table(model: Path, n_tools: int) -> Table:
    from grammars.compile import GrammarCompiler
    from grammars.json_schema import check_schema
    from grammars.tool_calls import tool_call_constraint

    schemas = [check_schema(e["schema"]).canonical for e in json.loads((DATA / "json_schemas.json").read_text())]
    table = Table(title=f"grammar compile ({model.name} tokenizer, service compiler: worker process + LRU)")
    for col in ("grammar", "n", "cold p50 ms", "cold max ms", "cached p50 ms", "cached max ms"):
        table.add_column(col, justify="right")
    with GrammarCompiler(model, timeout_s=120) as compiler:
        compiler.start()
        rows = [("json_schema (test corpus)", [lambda s=s: compiler.compile_json_schema(s) for s in schemas])]
        for fmt in ("qwen", "generic"):
            for mode in ("auto", "required"):
                tag = tool_call_constraint(fmt, _many_tools(n_tools), mode).value
                rows.append((f"{n_tools} tools, {fmt}, {mode}", [lambda t=tag: compiler.compile_structural_tag(t)]))
        for label, calls in tqdm(rows, desc="compile"):
            cold = [_timed(c) * 1e3 for c in calls]
            cached = [_timed(c) * 1e3 for c in calls for _ in range(20)]
            table.add_row(
                label,
                str(len(calls)),
                f"{statistics.median(cold):.1f}",
                f"{max(cold):.1f}",
                f"{statistics.median(cached):.4f}",
                f"{max(cached):.4f}",
            )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2 from the asset cache)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tools", type=int, default=64)
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--engine", action="store_true", help="also the engine alone (in-process, no HTTP)")
    parser.add_argument("--backends", nargs="+", default=["llguidance"], choices=["llguidance", "xgrammar"])
    args = parser.parse_args()
    from assets import fetch

    model = args.model or fetch().smollm2
    console = Console(width=160)
    console.print(compile_table(model, args.tools))
    if not args.skip_decode:
        for backend in args.backends:
            console.print(decode_table(model, args.rounds, args.max_tokens, args.concurrency, backend))
    if args.engine:
        console.print(engine_table(model, args.rounds, args.max_tokens, args.concurrency))


if __name__ == "__main__":
    main()

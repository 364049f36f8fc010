"""Cold tool-call grammars: what a new 64-tool set costs before its first token.

1. Library: the 64-tool grammar (qwen and generic, auto and required) on SmolLM2's tokenizer,
   in this process: xgrammar's compile as SGLang runs it (``compile_structural_tag``), against
   the llguidance route: the service's translate + validate (``LarkRouter.route``), then the
   scheduler's build (SGLang's ``GuidanceBackend``) and its first token mask.
2. Served: ``structserve serve`` on SmolLM2 with ``grammar.backend`` llguidance (the default)
   and xgrammar, one after the other. 64 rendered tools are a 14,000-token prompt, past SmolLM2's
   8,192-token context, so the served tool set is 24 tools (``--served-tools``), the corpus tools
   with the longest ``maxLength`` first (the ones xgrammar is slow on: CHANGELOG.md,
   structured outputs). Per trial a new tool set (a unique first name):
   r1 ``required`` + ``parallel_tool_calls: false`` (new prompt, new grammar), r2 the same with
   ``parallel_tool_calls: true`` (the prompt is cached now, the grammar is new), r3 = r2 again
   (both cached). Latency of one token (``max_tokens`` 1); the grammar's cost is r2 - r3. Counts
   from the servers' own metrics: grammars built in the scheduler and compiled by the service.

    .venv/bin/python bench/tool_grammar_cold.py               # ~6 min
    .venv/bin/python bench/tool_grammar_cold.py --trials 3 --skip-served
"""

from __future__ import annotations

import argparse
import json
import re
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
sys.path.insert(0, str(ROOT / "bench"))

from structured_overhead import _many_tools  # noqa: E402

from tests.server import ServerProcess  # noqa: E402

BACKENDS = ("llguidance", "xgrammar")
METRIC = re.compile(r"^structserve_(engine_grammar_compiles|grammar_cache_total)\{([^}]*)\} (\S+)$", re.M)


def _ms(fn) -> tuple[float, object]:
    began = time.perf_counter()
    out = fn()
    return (time.perf_counter() - began) * 1e3, out


def library_table(model: Path, n_tools: int) -> Table:
    import llguidance.torch as lt
    import transformers
    from llguidance import grammar_from
    from sglang.srt.constrained.llguidance_backend import GuidanceBackend

    from grammars.compile import LarkRouter, load_compiler
    from grammars.tool_calls import tool_call_constraint

    _, compiler = load_compiler(model)
    router = LarkRouter(model / "tokenizer.json")  # built once, at the service's startup
    config = json.loads((model / "config.json").read_text())
    guidance = GuidanceBackend(transformers.AutoTokenizer.from_pretrained(model), n_vocab=config["vocab_size"])
    table = Table(title=f"{n_tools}-tool call grammar, cold, {model.name} tokenizer (one process)")
    for col in ("grammar", "xgrammar compile ms", "route ms (service)", "build ms (scheduler)", "first mask ms",
                "llguidance total ms", "ratio"):  # fmt: skip
        table.add_column(col, justify="right")
    for fmt in tqdm(("qwen", "generic"), desc="library"):
        for mode in ("auto", "required"):
            tag = tool_call_constraint(fmt, _many_tools(n_tools), mode).value
            xgr_ms, _ = _ms(lambda: compiler.compile_structural_tag(tag))
            route_ms, lark = _ms(lambda: router.route("structural_tag", tag))
            assert lark is not None, f"{fmt} {mode}: not routed"
            build_ms, grammar = _ms(lambda: guidance._from_serialized(grammar_from("lark", lark)))
            mask = lt.allocate_token_bitmask(1, guidance.llguidance_tokenizer.vocab_size)
            mask_ms, _ = _ms(lambda: grammar.fill_vocab_mask(mask, 0))
            total = route_ms + build_ms + mask_ms
            table.add_row(f"{fmt}, {mode}", f"{xgr_ms:.1f}", f"{route_ms:.1f}", f"{build_ms:.1f}", f"{mask_ms:.1f}",
                          f"{total:.1f}", f"{xgr_ms / total:.1f}x")  # fmt: skip
    return table


def _counts(server: ServerProcess) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    return {labels: float(value) for _, labels, value in METRIC.findall(text)}


def _one_token(server: ServerProcess, tools: list[dict], parallel: bool) -> tuple[float, int]:
    body = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools,
        "tool_choice": "required",
        "parallel_tool_calls": parallel,
        "max_tokens": 1,
        "temperature": 0,
    }
    began = time.perf_counter()
    reply = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=600)
    seconds = time.perf_counter() - began
    reply.raise_for_status()
    cached = (reply.json()["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return seconds * 1e3, cached


def _max_length(schema: object) -> int:
    from grammars.json_schema import iter_subschemas

    lengths = [n.value.get("maxLength", 0) for n in iter_subschemas(schema or {}) if isinstance(n.value, dict)]
    return max([0, *lengths])


def _tool_set(n_tools: int, trial: int) -> list[dict]:
    specs = sorted(_many_tools(46), key=lambda s: -_max_length(s.parameters))[:n_tools]
    tools = [{"type": "function", "function": {"name": s.name, "parameters": s.parameters}} for s in specs]
    tools[0]["function"]["name"] = f"lookup_{trial}_{time.time_ns()}"
    return tools


def served_rows(model: Path, backend: str, n_tools: int, trials: int) -> list[str]:
    server = ServerProcess(model, name=f"bench-tools-{backend}", env={"STRUCTSERVE_GRAMMAR__BACKEND": backend})
    server.start()
    try:
        _one_token(server, _tool_set(n_tools, -1), True)  # warm-up: the engine's first request
        before = _counts(server)
        rows: list[tuple[float, float, float, int, int]] = []
        for trial in tqdm(range(trials), desc=f"served, {backend}"):
            tools = _tool_set(n_tools, trial)
            r1, _ = _one_token(server, tools, False)
            r2, cached2 = _one_token(server, tools, True)
            r3, cached3 = _one_token(server, tools, True)
            rows.append((r1, r2, r3, cached2, cached3))
        after = _counts(server)
    finally:
        server.stop()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    cached = "/".join(sorted({f"{r[3]}-{r[4]}" for r in rows}))
    per_set = {k.replace('"', ""): round(v / trials, 2) for k, v in delta.items()}
    return [backend, *(f"{m:.0f}" for m in med), f"{med[1] - med[2]:.0f}", cached, json.dumps(per_set)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--tools", type=int, default=64)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--served-tools", type=int, default=24)
    parser.add_argument("--skip-served", action="store_true")
    args = parser.parse_args()
    from assets import fetch

    model = args.model or fetch().smollm2
    console = Console(width=200)
    console.print(library_table(model, args.tools))
    if args.skip_served:
        return
    table = Table(title=f"served: {args.served_tools} new tools, 1 token, SmolLM2, medians of {args.trials} tool sets")
    columns = ("grammar.backend", "r1 new prompt+grammar ms", "r2 new grammar ms", "r3 cached ms",
               "grammar cost r2-r3 ms", "cached prompt tokens r2-r3", "counts per tool set (3 requests)")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="right")
    for backend in BACKENDS:
        table.add_row(*served_rows(model, backend, args.served_tools, args.trials))
    console.print(table)


if __name__ == "__main__":
    main()

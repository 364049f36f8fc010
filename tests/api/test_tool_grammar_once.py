"""A tool-call grammar is compiled once for the service and SGLang's scheduler together, by
llguidance, lazily: the service only translates and validates it
(``grammars.compile.llguidance_route``), the scheduler builds it (``runtime_ext.grammar_route``),
and a repeat is a cache hit on both sides. The counts are the scheduler's own
(``structserve_engine_grammar_compiles``) and the service's (``structserve_grammar_cache``).
The tiny Qwen3 (fast prefill) with 12 corpus tools: 64 rendered tools are a 14,000-token prompt,
past both test models' context; bench/tool_grammar_cold.py times 64 tools on the libraries."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import openai

TOOLS = json.loads((Path(__file__).parent.parent / "data" / "tools.json").read_text())


def many_tools(n: int) -> list[dict]:
    """``n`` tools: the corpus, then renamed copies (as bench/structured_overhead.py builds them)."""
    out = []
    for i in range(n):
        fn = dict(TOOLS[i % len(TOOLS)]["function"])
        fn["name"] = fn["name"] if i < len(TOOLS) else f"{fn['name']}_{i}"
        out.append({"type": "function", "function": fn})
    return out


def counters(server) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    found = {
        f"engine:{k}": float(v)
        for k, v in re.findall(r'^structserve_engine_grammar_compiles\{library="(\w+)"\} (\S+)$', text, re.M)
    }
    found |= {
        f"service:{kind}:{result}": float(v)
        for kind, result, v in re.findall(
            r'^structserve_grammar_cache_total\{kind="(\w+)",result="(\w+)"\} (\S+)$', text, re.M
        )
    }
    return found


def test_a_tool_grammar_is_compiled_once_per_process_pair_by_llguidance(qwen_server):
    client = openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="x", max_retries=0, timeout=600)
    tools = many_tools(12)
    tools[0]["function"]["name"] = f"lookup_{time.time_ns()}"  # a tool set no earlier test sent
    before = counters(qwen_server)
    for _ in range(2):
        reply = client.chat.completions.create(
            model=qwen_server.model_name,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=tools,
            tool_choice="required",
            max_tokens=48,
            temperature=0,
        )
        calls = reply.choices[0].message.tool_calls or []
        assert calls or reply.choices[0].finish_reason == "length", reply
        for call in calls:
            assert call.function.name in {t["function"]["name"] for t in tools}
    after = counters(qwen_server)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    assert delta.get("engine:llguidance") == 1, delta  # one build in the scheduler, the repeat is a hit
    assert delta.get("engine:xgrammar", 0) == 0, delta  # SGLang's xgrammar never saw it
    assert delta.get("service:structural_tag:miss", 0) == 0, delta  # nor the service's compiler
    assert delta.get("service:llguidance_lark:routed") == 2, delta

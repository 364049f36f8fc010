"""Multi-replica routing: SGLang's model gateway (smg, cache-aware) vs nginx least_conn in front of
the same structserve replicas, on one multi-tenant agent workload; then the gateway again with one
replica SIGKILLed half-way through.

Workload: T tenants, each with its own long system prompt (an Austen passage of its own plus a tool
list, ~1k tokens); C conversations per tenant of K turns whose history grows turn by turn (the
model's own answer is appended, then the next question); conversations start interleaved across
tenants every ``--arrival`` seconds, turns follow each other after ``--think`` seconds. Every arm
restarts the replicas (cold caches) and sends the same requests. Each replica is pinned to its own
core (``SGLANG_CPU_OMP_THREADS_BIND``) and holds ``--pool`` KV tokens: about half the tenants'
prefixes, as a fleet whose aggregate cache only helps when each prefix lives on one replica.

Hit rate = sum(cached_tokens) / sum(prompt_tokens) from each answer's usage; TTFT = time to the
first content token (streamed); split = each replica's share of the chat requests (its /metrics).
Writes docs/img/gateway_ttft.png (TTFT distribution per arm).

    .venv/bin/python bench/gateway.py      # ~10 min here (3 arms x 2 SmolLM2 replicas)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOOLS = [
    {"name": n, "description": d, "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    for n, d in [
        ("search_orders", "Find a customer's orders by name, date or status."),
        ("refund", "Refund an order, in full or in part, with a reason."),
        ("lookup_policy", "Read the tenant's policy on returns, shipping and warranty."),
        ("escalate", "Hand the conversation to a human agent with a summary."),
    ]
]
QUESTIONS = ["Where is my order?", "Can I return it?", "What does the warranty cover?", "Please escalate this."]
CHAT = ("structserve_requests_total", (("route", "/v1/chat/completions"), ("status", "200")))


@dataclass
class Conversation:
    tenant: int
    start: float
    turns: int
    results: list[dict] = field(default_factory=list)


def tenant_system(tenant: int, chars: int) -> str:
    books = sorted((Path.home() / ".cache/structserve/text/austen").glob("*.txt"))
    text = books[tenant % len(books)].read_text(errors="replace")
    offset = 20_000 + (tenant // len(books)) * chars * 2
    return (
        f"You are the support agent of tenant {tenant}. Style guide, quoted from the tenant's favourite book:\n"
        + " ".join(text[offset : offset + chars].split())
        + "\nTools you may call:\n"
        + json.dumps(TOOLS)
    )


def workload(args: argparse.Namespace) -> list[Conversation]:
    order = [(c, t) for c in range(args.conversations) for t in range(args.tenants)]  # interleaved tenants
    return [Conversation(t, i * args.arrival, args.turns) for i, (_, t) in enumerate(order)]


async def turn(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    start, first, text, usage = time.perf_counter(), None, [], None
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                return {"ok": False, "streamed": False, "why": f"HTTP {resp.status_code}"}
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                piece = "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices", []))
                if piece and first is None:
                    first = time.perf_counter()
                text.append(piece)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return {"ok": False, "streamed": first is not None, "why": type(exc).__name__}
    if usage is None:
        return {"ok": False, "streamed": first is not None, "why": "no usage"}
    end = time.perf_counter()
    return {"ok": True, "ttft": (first or end) - start, "usage": usage, "text": "".join(text)}


async def converse(client, url: str, model: str, conv: Conversation, system: str, args, t0: float, bar) -> None:
    await asyncio.sleep(max(0.0, t0 + conv.start - time.perf_counter()))
    messages = [{"role": "system", "content": system}]
    for k in range(conv.turns):
        messages.append({"role": "user", "content": QUESTIONS[k % len(QUESTIONS)]})
        body = {"model": model, "messages": messages, "max_tokens": args.max_tokens, "temperature": 0}
        result = await turn(client, url, {**body, "stream": True, "stream_options": {"include_usage": True}})
        conv.results.append(result)
        bar.update()
        if not result["ok"]:
            return
        messages.append({"role": "assistant", "content": result["text"]})
        await asyncio.sleep(args.think)


async def drive(front: str, model: str, convs: list[Conversation], args, kill) -> float:
    systems = {t: tenant_system(t, args.prefix_chars) for t in range(args.tenants)}
    total = sum(c.turns for c in convs)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=httpx.Limits(max_connections=64)) as client:
        with tqdm(total=total, desc=kill.name if kill else "run") as bar:
            tasks = [
                converse(client, f"{front}/v1/chat/completions", model, c, systems[c.tenant], args, t0, bar)
                for c in convs
            ]
            killer = [kill.after(bar, total // 2)] if kill else []
            await asyncio.gather(*tasks, *killer)
    return time.perf_counter() - t0


class Kill:
    """SIGKILL one replica (and its SGLang children) once ``at`` requests have been sent."""

    name = "gateway, 1 replica killed"

    def __init__(self, replica) -> None:
        self.replica = replica

    async def after(self, bar, at: int) -> None:
        while bar.n < at:
            await asyncio.sleep(0.1)
        parent = psutil.Process(self.replica.proc.pid)
        for proc in [*parent.children(recursive=True), parent]:
            proc.kill()


def scrape(url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def run_arm(arm: str, args, model: Path) -> dict:
    from tests.fronts import Gateway, Nginx
    from tests.server import ServerProcess

    env = {"STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(args.pool), "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": "16"}
    replicas = [
        ServerProcess(model, f"gw-bench-{i}", env={**env, "SGLANG_CPU_OMP_THREADS_BIND": str(i)}) for i in range(2)
    ]
    front, convs = None, workload(args)
    try:
        for r in replicas:
            r.start()
        urls, tmp = [r.base_url for r in replicas], Path(tempfile.mkdtemp(prefix=f"gw-{arm}-"))
        front = Nginx(urls, tmp) if arm == "nginx" else Gateway(urls, tmp / "smg.log")
        kill = Kill(replicas[1]) if arm == "kill" else None
        elapsed = asyncio.run(drive(front.url, replicas[0].model_name, convs, args, kill))
        split = [scrape(r.base_url).get(CHAT, 0.0) if r.proc.poll() is None else None for r in replicas]
        return summarize([x for c in convs for x in c.results], elapsed, split)
    finally:
        if front is not None:
            front.stop()
        for r in replicas:
            r.stop()


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def summarize(results: list[dict], elapsed: float, split: list) -> dict:
    ok = [r for r in results if r["ok"]]
    prompt = sum(r["usage"]["prompt_tokens"] for r in ok)
    cached = sum((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0) for r in ok)
    ttft = [r["ttft"] for r in ok]
    known = [s for s in split if s is not None]
    return {
        "requests": len(results),
        "failed_before_stream": sum(1 for r in results if not r["ok"] and not r["streamed"]),
        "cut_mid_stream": sum(1 for r in results if not r["ok"] and r["streamed"]),
        "hit_rate": cached / prompt if prompt else 0.0,
        "ttft_p50": pct(ttft, 50),
        "ttft_p99": pct(ttft, 99),
        "tok_s": sum(r["usage"]["completion_tokens"] for r in ok) / elapsed,
        "split": [s / sum(known) if s is not None else None for s in split] if sum(known) else [],
        "ttfts": ttft,
    }


def table(rows: dict[str, dict]) -> None:
    t = Table(title="gateway (smg cache_aware) vs nginx least_conn, 2 replicas, same requests")
    for col in (
        "front",
        "reqs",
        "hit rate",
        "TTFT p50 (s)",
        "TTFT p99 (s)",
        "tok/s",
        "split",
        "failed (not streamed)",
        "cut mid-stream",
    ):
        t.add_column(col, justify="right")
    for name, r in rows.items():
        split = "/".join("killed" if s is None else f"{s:.0%}" for s in r["split"])
        t.add_row(
            name,
            str(r["requests"]),
            f"{r['hit_rate']:.1%}",
            f"{r['ttft_p50']:.3f}",
            f"{r['ttft_p99']:.3f}",
            f"{r['tok_s']:.2f}",
            split,
            str(r["failed_before_stream"]),
            str(r["cut_mid_stream"]),
        )
    g, n = rows["gateway"], rows["nginx"]
    t.add_row(
        "gateway/nginx",
        "",
        f"{g['hit_rate'] / max(n['hit_rate'], 1e-9):.2f}×",
        f"{g['ttft_p50'] / n['ttft_p50']:.2f}×",
        f"{g['ttft_p99'] / n['ttft_p99']:.2f}×",
        f"{g['tok_s'] / n['tok_s']:.2f}×",
        "",
        "",
        "",
    )
    Console(width=200).print(t)


def plot(rows: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in rows.items():
        xs = sorted(r["ttfts"])
        ax.step(
            xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=f"{name} (hit {r['hit_rate']:.0%})"
        )
    ax.set_xscale("log")
    ax.set(xlabel="TTFT (s, log)", ylabel="share of requests", title="TTFT per front, same requests, 2 replicas")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path.home() / ".cache/structserve/models/smollm2-135m-instruct")
    p.add_argument("--tenants", type=int, default=8)
    p.add_argument("--conversations", type=int, default=2, help="per tenant")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--prefix-chars", type=int, default=3600, help="tenant system prompt (Austen) length")
    p.add_argument("--pool", type=int, default=6144, help="KV tokens per replica")
    p.add_argument("--arrival", type=float, default=1.5, help="seconds between conversation starts")
    p.add_argument("--think", type=float, default=0.5)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--arms", default="nginx,gateway,kill")
    p.add_argument("--plot", type=Path, default=ROOT / "docs/img/gateway_ttft.png")
    args = p.parse_args()
    names = {"nginx": "nginx", "gateway": "gateway", "kill": Kill.name}
    rows = {names[a]: run_arm(a, args, args.model) for a in args.arms.split(",")}
    for r in rows.values():
        print(json.dumps({k: v for k, v in r.items() if k != "ttfts"}))
    if "gateway" in rows and "nginx" in rows:
        table(rows)
    plot(rows, args.plot)


if __name__ == "__main__":
    main()

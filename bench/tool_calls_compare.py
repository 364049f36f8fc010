"""What ``bench/tool_calls.py``'s servers were given and how alike they answered."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console


def same_calls(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> tuple[int, int]:
    """(tasks whose calls are the same on both servers, tasks both answered), per (task, mode);
    calls compared as names with parsed arguments, order-free."""

    def calls(rec: dict[str, Any]) -> list[str]:
        out = []
        for c in rec.get("tool_calls") or []:
            try:
                out.append(json.dumps([c["name"], json.loads(c["arguments"])], sort_keys=True))
            except (TypeError, ValueError):
                out.append(json.dumps([c["name"], c["arguments"]]))
        return sorted(out)

    other = {(r["task"], r["mode"]): r for r in b if r.get("error") is None}
    keys = [(r, (r["task"], r["mode"])) for r in a if r.get("error") is None]
    pairs = [(r, other[k]) for r, k in keys if k in other]
    return sum(calls(x) == calls(y) for x, y in pairs), len(pairs)


def compare(results: dict[str, Any], console: Console) -> None:
    """What the servers were given and whether they answered alike: summed prompt tokens per
    server and mode (they differ when the servers render the tools into different prompts, which
    moves every other column), and the share of tasks with the same calls."""
    servers = list(results["servers"])
    for name in servers:
        sums = {m: s.get("prompt_tokens", 0) for m, s in results["servers"][name]["summary"].items()}
        console.print(f"{name}: prompt tokens {sums}")
    if len(servers) == 2:
        a, b = (results["servers"][n]["responses"] for n in servers)
        pa = {m: s.get("prompt_tokens") for m, s in results["servers"][servers[0]]["summary"].items()}
        pb = {m: s.get("prompt_tokens") for m, s in results["servers"][servers[1]]["summary"].items()}
        if pa != pb:
            console.print(f"NOTE: the servers saw different prompts ({pa} vs {pb}): each rendered the tools its way")
        same, both = same_calls(a, b)
        console.print(f"same calls on both servers: {same}/{both} (task, tool_choice) pairs")

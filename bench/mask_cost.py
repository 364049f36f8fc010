"""Per-token mask cost of the two ``grammar.json_schema_semantics`` routes, model-free: for each schema
of the API tests' corpus (``tests/data/json_schemas.json``, each with a valid example), the grammar the
service sends (``exact``: llguidance's own JSON Schema compiler, ``LarkRouter.route_native``;
``strict``: the Lark translation of strict mode, ``LarkRouter.route``), then the example written as
the grammar writes JSON, walked token by token through llguidance's matcher on SmolLM2's tokenizer:
the CPU time of ``fill_next_token_bitmask`` (what SGLang's llguidance backend calls once per decode
step) per token. Rounds alternate the two routes; the table gives the median over schemas of each
schema's median, per round, and the spread over rounds.

    .venv/bin/python bench/mask_cost.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grammars.compile import LarkRouter  # noqa: E402
from grammars.json_schema import check_schema  # noqa: E402
from tools.grammar_check import grammar_text  # noqa: E402

CORPUS = json.loads((ROOT / "tests" / "data" / "json_schemas.json").read_text())
ROUTES = ("exact", "strict")


class Walker:
    """SmolLM2's tokenizer for llguidance, and the service's router."""

    def __init__(self, model: Path) -> None:
        from llguidance.hf import from_tokenizer
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        self.ll = from_tokenizer(self.tokenizer)
        self.router = LarkRouter(model / "tokenizer.json")

    def grammar(self, route: str, canonical: str) -> str | None:
        if route == "exact":
            return self.router.route_native(canonical)[0]
        return self.router.route("json_schema", canonical)

    def seconds_per_token(self, grammar: str, text: str) -> float | None:
        """CPU seconds of one mask per token of ``text`` (+ the stop token); None if refused."""
        from llguidance import LLMatcher
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        matcher = LLMatcher(self.ll, grammar, log_level=0)
        mask = allocate_token_bitmask(1, self.ll.vocab_size)
        tokens = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        spent = 0.0
        for token in tokens:
            began = time.process_time()
            fill_next_token_bitmask(matcher, mask, 0)
            spent += time.process_time() - began
            if not matcher.consume_token(token):
                return None
        return spent / len(tokens)


def cases(walker: Walker) -> list[tuple[str, dict[str, str], str]]:
    """(name, {route: grammar}, example text) for the schemas both routes serve."""
    out = []
    for entry in CORPUS:
        canonical = check_schema(entry["schema"]).canonical
        grammars = {route: walker.grammar(route, canonical) for route in ROUTES}
        if all(grammars.values()):
            text = grammar_text(entry["valid_example"], json.loads(canonical), const_separators=(", ", ": "))
            out.append((entry["name"], grammars, text))
    return out


def measure(
    walker: Walker, work: list[tuple[str, dict[str, Any], str]], rounds: int
) -> tuple[dict[str, list[float]], int]:
    """Per route, one value per round: the median over the schemas whose example both routes take
    of µs per token; and how many those are."""
    per_round: dict[str, list[float]] = {route: [] for route in ROUTES}
    for index in tqdm(range(rounds), desc="rounds"):
        order = ROUTES if index % 2 == 0 else ROUTES[::-1]
        costs = {
            route: [walker.seconds_per_token(grammars[route], text) for _, grammars, text in work] for route in order
        }
        walked = [i for i in range(len(work)) if all(costs[route][i] is not None for route in ROUTES)]
        for route in ROUTES:
            per_round[route].append(1e6 * statistics.median(costs[route][i] or 0.0 for i in walked))
    return per_round, len(walked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", type=Path, default=None, help="tokenizer dir (default: SmolLM2)")
    args = parser.parse_args()
    if args.model is None:
        from assets import model_dir

        args.model = model_dir("smollm2")
    walker = Walker(args.model)
    work = cases(walker)
    per_round, walked = measure(walker, work, args.rounds)
    title = f"mask cost per token: {walked} of {len(CORPUS)} corpus schemas, {args.rounds} alternating rounds"
    table = Table(title=title)
    for column in ("route", "µs/token (median of rounds)", "rounds min-max", "vs strict"):
        table.add_column(column, justify="right")
    base = statistics.median(per_round["strict"])
    for route in ROUTES:
        values = per_round[route]
        mid = statistics.median(values)
        table.add_row(route, f"{mid:.1f}", f"{min(values):.1f}-{max(values):.1f}", f"{mid / base:.2f}x")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()

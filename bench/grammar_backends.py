"""Choose the grammar library by measurement: xgrammar 0.2.7 vs llguidance 1.9.1, the
two grammar backends SGLang 0.5.23 ships, on the same corpora and the same tokenizer (SmolLM2's).

Corpora:
- the test corpus (``tests/data/json_schemas.json``: 37 schemas, each with a valid example);
- the JSON-Schema-Test-Suite draft2020-12 schemas (``optional/`` skipped, as in the tests), each
  with its first valid instance;
- a 64-tool call grammar (the 46 corpus tools plus renamed copies): for xgrammar the structural
  tag the service really compiles (``tool_choice: required``, qwen format); for llguidance the
  same calls as a Lark grammar with one ``%json`` per tool's arguments (SGLang's llguidance
  backend takes only the legacy structural-tag format, so this is how it would be handed over).

Per library and corpus: how many compile *exactly* (no error and no warning: a warning is a
constraint the library drops, which the service's fail-closed policy turns into a 400), cold
compile (build the grammar until the first mask is filled: llguidance computes lazily, so its
first mask is part of the cost), the per-token mask fill while walking the valid instance
(``fill_next_token_bitmask`` + accept), and how many valid instances the grammar accepted. Both
libraries emit compact JSON with ``", "``/``": "`` separators (the service's settings).

    .venv/bin/python bench/grammar_backends.py            # table + docs/img/grammar_backends.png
    .venv/bin/python bench/grammar_backends.py --suite-limit 60
    .venv/bin/python bench/grammar_backends.py --corpora counted --png /tmp/counted.png   # counted strings only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
SEPARATORS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass
class Case:
    """One grammar: the JSON schema (or the 64-tool texts), and one text it must accept."""

    name: str
    schema: Any
    text: str
    invalid: str | None = None  # an instance the schema refuses (the suite's first), if any
    xgrammar: tuple[str, str] | None = None  # (kind, text) when not the schema itself
    lark: str | None = None  # llguidance's grammar when not the schema itself


@dataclass
class Row:
    """What one library did on one corpus."""

    cases: int = 0
    exact: int = 0
    accepted: int = 0
    invalid: int = 0
    loosened: list[str] = field(default_factory=list)  # invalid instances the grammar let through
    cold_ms: list[float] = field(default_factory=list)
    mask_us: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class XGrammar:
    """xgrammar as SGLang builds it (``load_compiler``: same tokenizer info, cache off); with
    ``policy``, behind the service's fail-closed check (``grammars.json_schema.policy.check_schema``: a
    keyword xgrammar would drop or loosen is refused up front), as structserve serves it."""

    def __init__(self, loaded: tuple[Any, Any], policy: bool = False) -> None:
        import xgrammar

        self.xgr, self.policy = xgrammar, policy
        self.tokenizer, self.compiler = loaded
        self.name = f"xgrammar {version('xgrammar')}" + (" + structserve policy" if policy else "")

    def compile(self, case: Case) -> tuple[Any, list[str]]:
        from grammars.compile import capture_warnings, compile_text
        from grammars.json_schema import check_schema

        schema = case.schema
        if self.policy and case.xgrammar is None:
            schema = json.loads(check_schema(schema).canonical)
        kind, text = case.xgrammar or ("json_schema", json.dumps(schema))
        compiled, warnings = capture_warnings(lambda: compile_text(self.compiler, kind, text))
        matcher = self.xgr.GrammarMatcher(compiled)
        mask = self.xgr.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
        matcher.fill_next_token_bitmask(mask)
        return (matcher, mask), warnings

    def step(self, handle: Any, token: int) -> bool:
        matcher, mask = handle
        matcher.fill_next_token_bitmask(mask)
        return bool((mask[0, token // 32] >> (token % 32)) & 1) and matcher.accept_token(token)

    def done(self, handle: Any) -> bool:
        matcher, _ = handle
        return matcher.accept_token(self.tokenizer.eos_token_id)


class LLGuidance:
    name = f"llguidance {version('llguidance')}"

    def __init__(self, model: Path) -> None:
        import llguidance
        import llguidance.torch
        from llguidance.hf import from_tokenizer
        from transformers import AutoTokenizer

        self.ll = llguidance
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        config = json.loads((model / "config.json").read_text())
        # as SGLang's GuidanceBackend builds it: the model's vocab size and EOS
        self.ll_tokenizer = from_tokenizer(
            self.tokenizer, config.get("vocab_size"), eos_token=config.get("eos_token_id")
        )

    def compile(self, case: Case) -> tuple[Any, list[str]]:
        matcher_cls = self.ll.LLMatcher
        if case.lark is not None:
            grammar = matcher_cls.grammar_from_lark(case.lark)
        else:
            grammar = matcher_cls.grammar_from_json_schema(json.dumps(case.schema), defaults=SEPARATORS)
        is_error, warnings = matcher_cls.validate_grammar_with_warnings(grammar, self.ll_tokenizer)
        if is_error:
            raise ValueError(warnings[0])
        matcher = matcher_cls(self.ll_tokenizer, grammar, log_level=0)
        mask = self.ll.torch.allocate_token_bitmask(1, self.ll_tokenizer.vocab_size)
        self.ll.torch.fill_next_token_bitmask(matcher, mask, 0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return (matcher, mask), list(warnings)

    def step(self, handle: Any, token: int) -> bool:
        matcher, mask = handle
        self.ll.torch.fill_next_token_bitmask(matcher, mask, 0)
        allowed = bool((mask[0, token // 32] >> (token % 32)) & 1)
        return allowed and matcher.consume_token(token) and not matcher.is_error()

    def done(self, handle: Any) -> bool:
        return bool(handle[0].is_accepting())


def run(library: Any, cases: list[Case], desc: str) -> Row:
    row = Row()
    for case in tqdm(cases, desc=desc, leave=False):
        row.cases += 1
        began = time.perf_counter()
        try:
            handle, warnings = library.compile(case)
        except Exception as exc:  # noqa: BLE001 - a library refusing the grammar is a result
            row.failures.append(f"{case.name}: {str(exc).splitlines()[0][:120]}")
            continue
        row.cold_ms.append((time.perf_counter() - began) * 1e3)
        row.exact += not warnings
        row.accepted += walk(library, handle, case.text, row.mask_us)
        if case.invalid is not None:
            row.invalid += 1
            if walk(library, library.compile(case)[0], case.invalid, []):
                row.loosened.append(f"{case.name}: {case.invalid[:60]}")
    return row


def walk(library: Any, handle: Any, text: str, times: list[float]) -> bool:
    """Feed ``text``'s tokens through the grammar (timing each mask fill + accept); True when
    every token was allowed and the grammar may stop after them."""
    for token in library.tokenizer.encode(text, add_special_tokens=False):
        began = time.perf_counter()
        ok = library.step(handle, token)
        times.append((time.perf_counter() - began) * 1e6)
        if not ok:
            return False
    return library.done(handle)


def corpus_cases() -> list[Case]:
    from grammars.json_schema import check_schema
    from tools.grammar_check import grammar_text

    cases = []
    for entry in json.loads((DATA / "json_schemas.json").read_text()):
        schema = json.loads(check_schema(entry["schema"]).canonical)
        cases.append(Case(entry["name"], schema, grammar_text(entry["valid_example"], schema)))
    return cases


def suite_cases(limit: int | None) -> list[Case]:
    from assets import schema_suite_dir
    from tools.grammar_check import grammar_text

    cases = []
    for path in sorted(schema_suite_dir().glob("*.json")):
        for group in json.loads(path.read_text()):
            valid = [t["data"] for t in group["tests"] if t["valid"]]
            invalid = [grammar_text(t["data"], group["schema"]) for t in group["tests"] if not t["valid"]]
            if valid and isinstance(group["schema"], dict) and "$ref" not in json.dumps(group["schema"]):
                schema, name = group["schema"], f"{path.stem}: {group['description']}"
                cases.append(Case(name, schema, grammar_text(valid[0], schema), invalid[0] if invalid else None))
    return cases[:limit]


def tool_cases(n: int) -> list[Case]:
    sys.path.insert(0, str(ROOT / "bench"))
    from structured_overhead import _many_tools

    from grammars.tool_calls import tool_call_constraint

    tools = _many_tools(n)
    tag = tool_call_constraint("qwen", tools, "required").value
    calls = [
        f'"<tool_call>\\n{{\\"name\\": \\"{t.name}\\", \\"arguments\\": " args{i} "}}\\n</tool_call>"'
        for i, t in enumerate(tools)
    ]
    rules = [
        f"args{i}: %json {json.dumps({'x-guidance': SEPARATORS, **(t.parameters or {})})}" for i, t in enumerate(tools)
    ]
    lark = 'start: call ("\\n" call)*\ncall: ' + "\n    | ".join(calls) + "\n" + "\n".join(rules) + "\n"
    text = f'<tool_call>\n{{"name": "{tools[0].name}", "arguments": {{"location": "Paris"}}}}\n</tool_call>'
    return [Case(f"{n} tools, qwen, required", None, text, xgrammar=("structural_tag", tag), lark=lark)]


def counted_cases() -> list[Case]:
    """One string property, plain and counted (``structured_overhead.py`` forces its length with
    ``minLength: 1500``), walked over ~2,000 characters of held-out prose."""
    from assets import eval_text

    prose = " ".join(eval_text()[5000:9000].split()).replace('"', "'")[:2000]
    text = json.dumps({"story": prose}, separators=(", ", ": "))
    cases = []
    for name, bound in (
        ("plain", {}),
        ("minLength 1500", {"minLength": 1500}),
        ("maxLength 3000", {"maxLength": 3000}),
    ):
        story = {"type": "string", **bound}
        schema = {
            "type": "object",
            "properties": {"story": story},
            "required": ["story"],
            "additionalProperties": False,
        }
        cases.append(Case(f"story, {name}", schema, text))
    return cases


CORPORA = ("test", "suite", "tools", "counted")


def corpora(args: argparse.Namespace) -> Iterator[tuple[str, list[Case]]]:
    if "test" in args.corpora:
        yield "test corpus", corpus_cases()
    if "suite" in args.corpora:
        yield "JSON-Schema-Test-Suite", suite_cases(args.suite_limit)
    if "tools" in args.corpora:
        yield f"{args.tools}-tool call grammar", tool_cases(args.tools)
    for case in counted_cases() if "counted" in args.corpora else []:
        yield f"counted string: {case.name}", [case]


def table(results: dict[tuple[str, str], Row]) -> Table:
    out = Table(title="grammar libraries on SmolLM2's tokenizer (one process each, cold = build until the first mask)")
    for col in (
        "corpus",
        "library",
        "grammars",
        "exact",
        "refused",
        "cold p50 ms",
        "cold max ms",
        "mask µs p50",
        "mask µs p99",
        "valid accepted",
        "invalid refused",
    ):
        out.add_column(col, justify="right")
    for (corpus, library), row in results.items():
        cold, mask = row.cold_ms or [float("nan")], sorted(row.mask_us) or [float("nan")]
        out.add_row(
            corpus,
            library,
            str(row.cases),
            str(row.exact),
            str(len(row.failures)),
            f"{statistics.median(cold):.1f}",
            f"{max(cold):.1f}",
            f"{statistics.median(mask):.1f}",
            f"{mask[int(0.99 * (len(mask) - 1))]:.1f}",
            f"{row.accepted}/{row.cases - len(row.failures)}",
            f"{row.invalid - len(row.loosened)}/{row.invalid}" if row.invalid else "-",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="tokenizer/model dir (default: SmolLM2)")
    parser.add_argument("--suite-limit", type=int, default=None, help="first N suite schemas only")
    parser.add_argument("--tools", type=int, default=64)
    parser.add_argument("--corpora", nargs="+", choices=CORPORA, default=list(CORPORA))
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "grammar_backends.png")
    args = parser.parse_args()
    from assets import fetch

    model = args.model or fetch().smollm2
    from grammars.compile import load_compiler

    loaded = load_compiler(model)  # one tokenizer info for both xgrammar rows
    libraries = [XGrammar(loaded), XGrammar(loaded, policy=True), LLGuidance(model)]
    results: dict[tuple[str, str], Row] = {}
    for corpus, cases in corpora(args):
        for library in libraries:
            results[(corpus, library.name)] = run(library, cases, f"{library.name}: {corpus}")
    console = Console(width=200)
    console.print(table(results))
    for (corpus, library), row in results.items():
        for failure in row.failures[:8]:
            console.print(f"[dim]{library} refused ({corpus}) {failure}[/dim]")
        for loose in row.loosened[:8]:
            console.print(f"[dim]{library} accepted an invalid instance ({corpus}) {loose}[/dim]")
    plot(results, args.png)


def plot(results: dict[tuple[str, str], Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (corpus, library), row in results.items():
        label = f"{library}, {corpus}"
        if row.cold_ms:
            axes[0].ecdf(row.cold_ms, label=label)
        if row.mask_us:
            axes[1].ecdf(row.mask_us, label=label)
    axes[0].set(xscale="log", xlabel="cold compile to first mask, ms", ylabel="share of grammars")
    axes[1].set(xscale="log", xlabel="mask fill + accept per token, µs", ylabel="share of tokens")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

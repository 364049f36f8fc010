"""Pure counting for ``bench/schema_coverage.py``: which MaskBench cases to run, and what the
outcomes add up to per subset and library. No grammar library, tokenizer or I/O beyond reading
the data folder (``load_cases``).

MaskBench (the ``maskbench/data`` folder of JSONSchemaBench) holds one JSON file per schema,
``<Subset>---<name>.json`` (a few sources are ``<Subset>_<n>.json``: ``BFCL_simple_7``,
``JME_12``), each ``{"schema": ..., "tests": [{"valid": bool, "data": ...}, ...]}``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Case", "Outcome", "Tally", "load_cases", "percentile", "reason_key", "reason_keys", "subset_of", "tally"]

ALL = "all"
"""The subset name of the totals row."""


@dataclass(frozen=True)
class Case:
    """One schema of MaskBench with its labelled instances."""

    subset: str
    name: str
    schema: Any
    valid: tuple[Any, ...] = ()
    invalid: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What one library did with one case.

    ``route``: the library that served it (``llguidance``/``xgrammar``; the grammar check picks one), ""
    when refused. ``reason``: why it was refused ("" when served). ``valid_refused`` /
    ``invalid_accepted``: instances the served grammar's token matcher got wrong."""

    subset: str
    name: str
    library: str
    served: bool
    route: str = ""
    reason: str = ""
    compile_ms: float = 0.0
    valid: int = 0
    invalid: int = 0
    valid_refused: int = 0
    invalid_accepted: int = 0
    examples: tuple[str, ...] = ()


VALIDATED = "+validate"
"""Route suffix of a schema served under a looser grammar, outputs validated and resampled: the
invalid instances its grammar admits are counted apart (``caught``), validation refuses them."""


@dataclass
class Tally:
    """Outcomes of one library over one subset (or all)."""

    schemas: int = 0
    served: int = 0
    routes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    compile_ms: list[float] = field(default_factory=list)
    valid: int = 0
    invalid: int = 0
    valid_refused: int = 0
    invalid_accepted: int = 0
    invalid_validated: int = 0  # invalid instances of the schemas served validated
    caught: int = 0  # of them, those the looser grammar admits (validation refuses them)

    def add(self, outcome: Outcome) -> None:
        self.schemas += 1
        if not outcome.served:
            self.reasons.update(reason_keys(outcome.reason))
            return
        self.served += 1
        self.routes[outcome.route] += 1
        self.compile_ms.append(outcome.compile_ms)
        self.valid += outcome.valid
        self.valid_refused += outcome.valid_refused
        if outcome.route.endswith(VALIDATED):
            self.invalid_validated += outcome.invalid
            self.caught += outcome.invalid_accepted
        else:
            self.invalid += outcome.invalid
            self.invalid_accepted += outcome.invalid_accepted

    @property
    def served_pct(self) -> float:
        return 100.0 * self.served / self.schemas if self.schemas else math.nan


def tally(outcomes: Iterable[Outcome]) -> dict[tuple[str, str], Tally]:
    """Per ``(subset, library)`` and per ``("all", library)``; instance counts only over the
    schemas that library served (a refused schema's instances were never generated)."""
    out: dict[tuple[str, str], Tally] = {}
    for outcome in outcomes:
        for subset in (outcome.subset, ALL):
            out.setdefault((subset, outcome.library), Tally()).add(outcome)
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")
_POINTER = re.compile(r"(?:at|in) /\S*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def reason_key(reason: str) -> str:
    """A refusal reason with its specifics (quoted names, pointers, numbers) blanked, so that
    refusals of one kind group together: ``unknown keyword 'id' at /a`` ->
    ``unknown keyword … …``."""
    line = (reason.strip().splitlines() or [""])[0]
    line = _POINTER.sub("…", _QUOTED.sub("…", line))
    return _NUMBER.sub("N", line)[:90]


UNSUPPORTED = "unsupported keywords: "


def reason_keys(reason: str) -> list[str]:
    """What a refusal is counted under: each keyword of an ``unsupported keywords: a, b,
    unknown:c`` refusal once (``keyword a``, ``keyword b``, and every unknown keyword as one
    ``unknown keyword (annotation)``), else its ``reason_key``."""
    if not reason.startswith(UNSUPPORTED):
        return [reason_key(reason)]
    names = [n.strip() for n in reason[len(UNSUPPORTED) :].split(",") if n.strip()]
    keys = ["unknown keyword (annotation)" if n.startswith("unknown:") else f"keyword {n}" for n in names]
    return list(dict.fromkeys(keys))


def subset_of(stem: str) -> str:
    """``Github_easy---o1234`` -> ``Github_easy``; ``BFCL_simple_7`` -> ``BFCL``."""
    if "---" in stem:
        return stem.split("---", 1)[0]
    return stem.split("_", 1)[0]


def _spread(name: str) -> str:
    """A stable pseudo-random order (so ``--limit`` samples across a subset, not its first
    names alphabetically)."""
    return hashlib.sha256(name.encode()).hexdigest()


def load_cases(data: Path, subsets: Iterable[str] | None = None, limit: int | None = None) -> list[Case]:
    """The cases of ``data`` (MaskBench's ``data`` folder), of the named subsets (all if None),
    at most ``limit`` per subset in a stable spread order; sorted by subset then name."""
    wanted = set(subsets) if subsets else None
    by_subset: dict[str, list[Path]] = {}
    for path in data.glob("*.json"):
        subset = subset_of(path.stem)
        if wanted is None or subset in wanted:
            by_subset.setdefault(subset, []).append(path)
    cases = []
    for subset, paths in sorted(by_subset.items()):
        for path in sorted(paths, key=lambda p: _spread(p.stem))[:limit]:
            cases.append(_case(subset, path))
    return sorted(cases, key=lambda c: (c.subset, c.name))


def _case(subset: str, path: Path) -> Case:
    entry = json.loads(path.read_text(encoding="utf-8"))
    tests = entry.get("tests") or []
    return Case(
        subset,
        path.stem,
        entry["schema"],
        tuple(t["data"] for t in tests if t.get("valid")),
        tuple(t["data"] for t in tests if not t.get("valid")),
    )

"""What a serving comparison checks before its ratios mean anything (pure: no servers, no I/O).

- ``check_prompt_tokens``: every server saw the same prompt tokens in total (summed
  ``usage.prompt_tokens``); a chat-template or tokenizer difference would move every ratio.
- ``identical_share``: the share of greedy completions identical (exact text) to the first
  server's for the same prompt and round.
- ``spread``: the median over rounds with its min and max.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class PromptTokensDiffer(RuntimeError):
    """The servers of one comparison were sent different prompt tokens (names every sum)."""


def check_prompt_tokens(sums: Mapping[str, int]) -> None:
    """Raise ``PromptTokensDiffer`` unless every server's summed prompt tokens equal the first's."""
    if not sums:
        raise PromptTokensDiffer("no server reported prompt tokens")
    first, expected = next(iter(sums.items()))
    differ = {name: n for name, n in sums.items() if n != expected}
    if differ:
        others = ", ".join(f"{name} {n}" for name, n in differ.items())
        raise PromptTokensDiffer(
            f"summed prompt tokens differ: {first} {expected} vs {others}; the servers did not see the same "
            "prompts (chat template, BOS or tokenizer), so their throughput and TTFT are not comparable"
        )


def identical_share(texts: Sequence[str], reference: Sequence[str]) -> float:
    """Share of ``texts`` equal (exactly) to ``reference`` at the same position."""
    if len(texts) != len(reference):
        raise ValueError(f"{len(texts)} completions against {len(reference)} reference completions")
    if not texts:
        raise ValueError("no completions to compare")
    return sum(a == b for a, b in zip(texts, reference, strict=True)) / len(texts)


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    def ratio(self, anchor: Spread) -> float:
        """This median over the anchor's median."""
        return self.median / anchor.median

    def __str__(self) -> str:
        return f"{self.median:.1f} ({self.low:.1f}–{self.high:.1f})"


def spread(values: Sequence[float]) -> Spread:
    """Median of ``values`` (one per round) with their min and max."""
    if not values:
        raise ValueError("no rounds to summarise")
    return Spread(statistics.median(values), min(values), max(values))

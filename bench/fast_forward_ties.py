"""Why a fast-forwarded greedy output differs from step-by-step's: where they part and how close
step-by-step's own choice was there (pure; used by ``bench/structured_fast_forward.py``).

A forced span is computed in one extend step, where decode takes one token at a time; in bf16 the
last bits of the logits differ, so only a near tie can flip. For each differing request this reports
the first token where the two outputs part and step-by-step's top-2 log-probability margin at that
token (from a re-run of the same batch with logprobs: logprobs do not change the logits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Parting:
    request: int
    at: int  # index of the first differing output token
    length: int  # step-by-step's output tokens
    margin: float | None  # step-by-step's top-1 minus top-2 logprob at ``at`` (None: not known)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def partings(
    fast: Sequence[Sequence[int]], step: Sequence[Sequence[int]], top2: Sequence[Sequence[Sequence[float]]]
) -> list[Parting]:
    """One ``Parting`` per request whose ``fast`` ids differ from ``step``'s; ``top2[r][i]``: the two
    best logprobs of step-by-step's request ``r`` at output position ``i``."""
    out = []
    for r, (f, s) in enumerate(zip(fast, step)):
        at = first_difference(f, s)
        if at is None:
            continue
        pair = top2[r][at] if at < len(top2[r]) else ()
        margin = pair[0] - pair[1] if len(pair) == 2 else None
        out.append(Parting(r, at, len(s), margin))
    return out


def describe(workload: str, conc: int, found: Sequence[Parting]) -> list[str]:
    return [
        f"- {workload} at {conc}, request {p.request}: parts at token {p.at} of {p.length}; "
        + ("step-by-step's top-2 margin there: " + f"{p.margin:.3f} nats" if p.margin is not None else "margin unknown")
        for p in found
    ]

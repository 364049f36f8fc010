"""Grammar fast-forward: the tokens an llguidance grammar forces cost no decode step each.

In a JSON object or a tool call many tokens are fixed by the grammar (``{"name": "``, property
names in declared order, closing brackets). SGLang 0.5.23's grammar objects compute them
(``GuidanceGrammar.try_jump_forward`` returns llguidance's ``compute_ff_tokens()``: the canonical
tokenization of the forced bytes, so the model sees what it would have produced) but its scheduler
never asks. With ``RuntimeExtConfig.fast_forward`` on, an AFTER hook on
``Scheduler.process_batch_result`` does, after every decode step:

- for each running request whose grammar is llguidance's (also inside SGLang's reasoning
  wrapper, which answers only once thinking is over), the forced span is appended to
  ``output_ids`` and consumed by the grammar;
- those requests leave the running batch the way SGLang retracts one, except that their
  computed KV is first inserted into the radix tree (``release_kv_cache(checkpoint=True)``), and
  go back to the waiting queue; the next prefill matches that prefix and computes the last sampled
  token plus the forced span in one extend step, whose sampled token follows as usual. The service
  turns SGLang's mixed chunk on with fast-forward (``service.startup.fast_forward_engine``): that
  extend then carries the running decodes in the same forward pass instead of pausing them, and
  the attention backend runs a short span's tokens as decode rows (``runtime_ext.attention.native``).

What stays exact: the forced tokens are ordinary output tokens (streamed with the next chunk,
counted as completion tokens, detokenized with the rest). A span never reaches ``max_new_tokens``
(it leaves room for the token the extend samples) and stops before any stop/EOS token id.
Requests that could finish inside a span or need per-token data are skipped: stop strings or
regexes, logprobs (forced tokens would carry none), hidden states, sampling masks, beam search.
xgrammar's jump-forward is a string, not tokens: its requests decode step by step.

Needs the overlap schedule off: under overlap the next decode batch is already launched when
this result is processed, so the request would be in flight while its tokens change. With overlap
on (or speculative decoding, or no radix cache to keep the computed prefix) fast-forward stays
inactive and says why once in the log and in the report (``inactive_reason``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger(__name__)
TARGET = "sglang.srt.managers.scheduler.Scheduler.process_batch_result"
MIN_SPAN = 1
"""Shortest forced span worth an extend step: one forced token already saves one decode step."""


@dataclass
class FastForwardStats:
    """This scheduler's counts: forward passes (all, decode ones, extends that carried the running
    decodes), spans appended and their tokens."""

    enabled: bool = False
    forward_passes: int = 0
    decode_steps: int = 0
    mixed_steps: int = 0
    spans: int = 0
    forced_tokens: int = 0
    inactive_reason: str = ""

    def report(self) -> dict[str, Any]:
        return asdict(self)


STATS = FastForwardStats()


def forced_span(tokens: Sequence[int], room: int, stop_ids: Iterable[int]) -> list[int]:
    """The part of ``tokens`` to append: at most ``room`` tokens, cut before the first stop id
    (the model samples a stop token itself, so the finish is SGLang's own)."""
    stops = set(stop_ids)
    span: list[int] = []
    for token in tokens[: max(room, 0)]:
        if token in stops:
            break
        span.append(token)
    return span


def inactive_reason(scheduler: Any, batch: Any) -> str:
    """Why fast-forward cannot run in this scheduler ("" when it can)."""
    if scheduler.enable_overlap or getattr(scheduler, "enable_overlap_mlx", False):
        return "the overlap schedule is on (engine.disable_overlap_schedule: true is needed)"
    if not batch.spec_algorithm.is_none():
        return "speculative decoding is on"
    if getattr(scheduler.tree_cache, "disable", False):
        return "the radix cache is off (the forced span would recompute the whole sequence)"
    return ""


def _is_guidance(grammar: Any) -> bool:
    from sglang.srt.constrained.llguidance_backend import GuidanceGrammar

    inner = getattr(grammar, "grammar", grammar)  # SGLang's reasoning wrapper holds the real one
    return isinstance(inner, GuidanceGrammar)


def _eligible(req: Any) -> bool:
    params = req.sampling_params
    return not (
        req.grammar is None
        or req.finished()
        or req.return_logprob
        or req.return_hidden_states
        or getattr(req, "return_sampling_mask", False)
        or req.beam_group is not None
        or params.stop_strs
        or getattr(params, "stop_regex_strs", None)
    )


def _stop_ids(req: Any) -> set[int]:
    ids = set(req.sampling_params.stop_token_ids or ()) | set(req.eos_token_ids or ())
    tokenizer = req.tokenizer
    if tokenizer is not None:
        if tokenizer.eos_token_id is not None:
            ids.add(tokenizer.eos_token_id)
        ids |= set(getattr(tokenizer, "additional_stop_token_ids", None) or ())
    return ids


def fast_forward(req: Any) -> int:
    """Append the grammar's forced span to ``req`` (grammar advanced); the tokens appended."""
    if not _eligible(req) or not _is_guidance(req.grammar) or req.grammar.is_terminated():
        return 0
    helper = req.grammar.try_jump_forward(None)
    if not helper:
        return 0
    room = req.sampling_params.max_new_tokens - len(req.output_ids) - 1
    span = forced_span(helper[0], room, _stop_ids(req))
    if len(span) < MIN_SPAN:
        return 0
    for token in span:
        req.grammar.accept_token(token)
    req.output_ids.extend(span)
    return len(span)


def requeue(scheduler: Any, batch: Any, moved: list[int]) -> None:
    """Take the ``moved`` rows out of the running ``batch`` with their computed KV kept in the
    radix tree, and put them back in the waiting queue (SGLang's retraction, prefix kept)."""
    from sglang.srt.mem_cache.common import release_kv_cache

    reqs = [batch.reqs[i] for i in moved]
    for req in reqs:
        release_kv_cache(req, scheduler.tree_cache, checkpoint=True)
        req.reset_for_retract()
    batch.filter_batch(keep_indices=[i for i in range(len(batch.reqs)) if i not in set(moved)])
    for req in reqs:
        scheduler._add_request_to_queue(req, is_retracted=True)


def after_batch_result(ret: Any, scheduler: Any, batch: Any, *_args: Any, **_kwargs: Any) -> Any:
    """AFTER hook: count the step; after a decode step with fast-forward on, append forced spans
    and requeue."""
    STATS.forward_passes += 1
    STATS.mixed_steps += batch.forward_mode.is_mixed()
    if not batch.forward_mode.is_decode():
        return ret
    STATS.decode_steps += 1
    if not STATS.enabled or STATS.inactive_reason:
        return ret
    reason = inactive_reason(scheduler, batch)
    if reason:
        STATS.inactive_reason = reason
        logger.warning("grammar fast-forward inactive: %s", reason)
        return ret
    moved = []
    for i, req in enumerate(batch.reqs):
        appended = fast_forward(req)
        if appended:
            moved.append(i)
            STATS.spans += 1
            STATS.forced_tokens += appended
    if moved:
        requeue(scheduler, batch, moved)
    return ret


def register(hooks: Any, hook_type: Any, enabled: bool) -> None:
    """Count decode steps always (the report's ``decode_steps``); fast-forward when ``enabled``."""
    STATS.enabled = enabled
    hooks.register(TARGET, after_batch_result, hook_type.AFTER)

"""Rows a C8 store could not keep, and failing exactly the requests that own them.

A K or V token holding a NaN or inf (a request's activations went non-finite), or whose C8-D
float16 scale would overflow (absmax above ~8.3e6), cannot be represented in the INT8 cache. The
store writes that token's rows as zeros (scale 0: never an ``inf`` scale) and marks its location
here; the batch goes on. Before SGLang's scheduler processes the batch's result
(``process_batch_result``), every request whose KV rows hold a marked location is finished
with an abort (``fault.MESSAGE``, status 422) and its rows are never inserted into
the prefix tree; SGLang frees them, and the free clears their marks. Other requests in the same
batch never read those rows (attention reads a request's own rows only), so they go on unchanged.

Cost: nothing on the normal path of the CPU kernels (the compiled store reports the rows it
refused; the reference path already checks). On an NPU the store marks without a host sync, and
the scheduler reads one flag per step (``maybe_marked``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from runtime_ext.kv_cache import fault

log = logging.getLogger(__name__)


class PoisonedRows:
    """One flag per pool location: 1 when a store refused that token's K or V in some layer."""

    def __init__(self, size: int, device: Any) -> None:
        self.flags = torch.zeros(size, dtype=torch.uint8, device=device)
        self.host_known = torch.device(device).type == "cpu"  # the store's verdict is on the host
        self.pending = False  # some location is marked (CPU: exact; NPU: unknown without a sync)
        self.requests_failed = 0
        self.tokens_refused = 0

    def mark(self, loc: Any, bad: torch.Tensor | None) -> None:
        """``bad[T]`` (None: all stored) for the rows ``loc[T]`` of one store."""
        if bad is None:
            return
        locs = torch.as_tensor(loc, device=self.flags.device).reshape(-1).long()
        if self.host_known:
            self.flags[locs[bad]] = 1
            self.tokens_refused += int(bad.sum())
        else:  # no host sync: a max-scatter keeps earlier layers' marks
            self.flags.scatter_reduce_(0, locs, bad.to(self.flags.dtype), reduce="amax")
        self.pending = True

    def maybe_marked(self) -> bool:
        if not self.pending:
            return False
        if not self.host_known:  # the one sync per step on an NPU while anything could be marked
            return bool(self.flags.any())
        return True

    def clear(self, locs: Any) -> None:
        """The allocator freed ``locs``: their marks go with them."""
        if not self.pending:
            return
        self.flags[torch.as_tensor(locs, device=self.flags.device).reshape(-1).long()] = 0
        if self.host_known:
            self.pending = bool(self.flags.any())

    def reset(self) -> None:
        """The allocator was cleared: nothing is marked."""
        self.flags.zero_()
        self.pending = False

    def owned_by(self, req_to_token: torch.Tensor, req: Any) -> bool:
        """Whether ``req``'s KV rows (its ``req_to_token`` row up to what it allocated) hold a mark."""
        kv = req.kv
        if kv.req_pool_idx is None or kv.kv_allocated_len <= 0:
            return False
        locs = req_to_token[kv.req_pool_idx, : kv.kv_allocated_len].long()
        return bool(self.flags[locs].any())


def fail_poisoned_requests(poison: PoisonedRows, scheduler: Any, batch: Any) -> int:
    """Finish every request of ``batch`` that owns a marked row (before its result is processed)."""
    if batch is None or not poison.maybe_marked():
        return 0
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    rows, failed = scheduler.req_to_token_pool.req_to_token, 0
    for req in batch.reqs:
        if req.finished() or not poison.owned_by(rows, req):
            continue
        req.skip_radix_cache_insert = True  # its zeroed rows must never serve another prompt
        req.grammar = None  # the token sampled from poisoned logits is not the grammar's to check
        if isinstance(req.to_finish, FINISH_ABORT):  # already aborting (the client left)
            continue
        reason = FINISH_ABORT(fault.MESSAGE, fault.STATUS, "UnprocessableEntityError")
        if batch.forward_mode.is_extend():
            req.discard_output_reason = reason  # finished without committing this forward's token
        req.to_finish = reason
        log.error("request %s failed: non-finite or unrepresentable K/V (rows zeroed, KV freed)", req.rid)
        failed += 1
    poison.requests_failed += failed
    return failed

"""The admission policy at SGLang's admission point: ``Scheduler.get_prefill_adder_class`` (an
AROUND hook) returns a subclass of SGLang's own ``PrefillAdder`` (no fork of the scheduler).

Both policies count: queue time at first admission, tokens recomputed for re-admitted
retracted requests (``_update_prefill_budget`` with ``retracted_stain``), and, through an AFTER
hook on ``ScheduleBatch.retract_decode``, every retraction. ``budget`` adds the check of
``runtime_ext.admission.budget``: a waiting request is admitted only when the worst-case pages
of everything running, of this pass's admissions and its own fit in free + evictable pages
(read under the candidate's prefix lock, as SGLang's own check does); otherwise the adder
answers ``NO_TOKEN``, SGLang's own "wait for memory" verdict. SGLang's check still runs after
ours. ``sglang`` leaves admission to SGLang (``new_token_ratio`` estimates, retraction).
"""

from __future__ import annotations

import time
from typing import Any

from runtime_ext.admission import decode_prealloc
from runtime_ext.admission.budget import PassBudget, Sequence, running_sequence, sequence, usage
from runtime_ext.state import AdmissionStats

ADDER_TARGET = "sglang.srt.managers.scheduler.Scheduler.get_prefill_adder_class"
RETRACT_TARGET = "sglang.srt.managers.schedule_batch.ScheduleBatch.retract_decode"
POLICIES = ("sglang", "budget")


def adder_class(base: type, stats: AdmissionStats) -> type:
    """SGLang's ``PrefillAdder`` (``base``) with our counters and, for ``budget``, our check."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    class StructservePrefillAdder(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # None under ``sglang``: no per-pass work beyond the counters
            self.structserve_budget = PassBudget(self.page_size) if stats.policy == "budget" else None
            for req in self.running_batch.reqs if self.structserve_budget and self.running_batch else ():
                self.structserve_budget.commit(running_sequence(req, stats.reserve_ratio))

        def add_chunked_req(self, req: Any) -> Any:
            out = super().add_chunked_req(req)  # runs whatever the budget says: it holds KV already
            if self.structserve_budget is not None:
                self.structserve_budget.commit(running_sequence(req, stats.reserve_ratio))
            return out

        def add_one_req(self, req: Any, has_chunked_req: bool, truncation_align_size: Any) -> Any:
            seq = sequence(req, req.prefix_len, stats.reserve_ratio)  # its matched prefix: reused, not reserved
            if self.structserve_budget is not None and not self._fits(req, seq):
                stats.budget_holds += 1
                return AddReqResult.NO_TOKEN
            result = super().add_one_req(req, has_chunked_req, truncation_align_size)
            if self.can_run_list and self.can_run_list[-1] is req:
                if self.structserve_budget is not None:
                    self.structserve_budget.commit(seq)
                stats.reused_tokens += seq.held_tokens
                entered = req.time_stats.wait_queue_entry_time
                if not req.retracted_stain and entered > 0:
                    stats.observe_queue_time(time.perf_counter() - entered)
            return result

        def _fits(self, req: Any, seq: Sequence) -> bool:
            assert self.structserve_budget is not None
            with self._lock_node(req.last_node):  # the prefix it reuses is not evictable for it
                free = self.token_to_kv_pool_allocator.available_size() + self.tree_cache.evictable_size()
                return self.structserve_budget.fits(seq, free // self.page_size)

        def _update_prefill_budget(self, prefix_len: int, extend_input_len: int, *args: Any, **kwargs: Any) -> Any:
            stained = args[1] if len(args) > 1 else kwargs.get("retracted_stain", False)
            if stained:
                stats.recomputed_tokens += int(extend_input_len)
            return super()._update_prefill_budget(prefix_len, extend_input_len, *args, **kwargs)

    StructservePrefillAdder.__name__ = f"Structserve{base.__name__}"
    return StructservePrefillAdder


def register(hooks: Any, hook_type: Any, stats: AdmissionStats, policy: str, reserve_ratio: float = 1.0) -> None:
    if policy not in POLICIES:
        raise ValueError(f"scheduling.admission={policy!r}; valid: {', '.join(POLICIES)}")
    stats.policy, stats.reserve_ratio = policy, reserve_ratio
    classes: dict[type, type] = {}

    def get_adder_class(original: Any, scheduler: Any) -> type:
        base = original(scheduler)
        if base not in classes:
            classes[base] = adder_class(base, stats)
        return classes[base]

    def count_retraction(result: Any, *_args: Any, **_kwargs: Any) -> Any:
        retracted = result[0] if isinstance(result, tuple) and result else []
        if retracted:
            stats.retractions += 1
            stats.retracted_requests += len(retracted)
            stats.retracted_tokens += sum(len(r.origin_input_ids) + len(r.output_ids) for r in retracted)
        return result

    hooks.register(ADDER_TARGET, get_adder_class, hook_type.AROUND)
    hooks.register(RETRACT_TARGET, count_retraction, hook_type.AFTER)
    if policy == "budget":  # the same arithmetic where a PD decode replica admits transfers
        decode_prealloc.register(hooks, hook_type, stats)


def admission_report(scheduler: Any, stats: AdmissionStats) -> dict:
    """The counters, plus what the scheduler holds now: queue length, running requests'
    worst-case (reserved) vs held (used) pages."""
    page = scheduler.token_to_kv_pool_allocator.page_size
    running = getattr(scheduler, "running_batch", None)
    seqs = [running_sequence(r, stats.reserve_ratio) for r in (running.reqs if running is not None else ())]
    return {
        **stats.report(),
        **usage(seqs, page),
        "waiting_requests": len(scheduler.waiting_queue),
        "pool_pages": int(scheduler.max_total_num_tokens) // page,
    }

"""Budget admission on a PD decode replica: a transfer is admitted only when the request's
worst-case pages fit beside the outstanding pages of everything decode already holds.

SGLang 0.5.23's decode side (``DecodePreallocQueue.pop_preallocated``) admits a transfer when
``available - max(reserved, one running request's remaining need)`` covers
``max(prompt pages + 512, prompt + min(max_new, 4096) - retractable)``, where ``reserved`` is a
fixed ``num_reserved_decode_tokens`` (512) per active request, whatever its ``max_tokens``, and
``retractable`` counts every running token as if it could be given back. Requests that may write
more than 512 tokens are then admitted beyond what the pool can hold, and decode retracts them
later (offloading their KV, or recomputing it).

Under ``scheduling.admission: budget`` two AROUND hooks put ``runtime_ext.admission.budget``'s
arithmetic in SGLang's own check (no fork of the queue):
- ``_active_reserved_tokens``: the outstanding pages (worst pages minus pages held) of every
  request decode holds — running, receiving a transfer, waiting to join the batch, preallocated
  earlier in this pass, and the last prebuilt batch — instead of 512 tokens each;
- ``_required_admission_tokens``: the candidate's own outstanding pages after its matched prefix
  (prompt + ``max_new_tokens`` + one overlap step), instead of the 512-token guess minus the
  retractable tokens.
SGLang's ``need_space_for_single_req`` term and every other check stay as they are, so the
budget only makes admission stricter. Requests preallocated in the current pass are not in any
queue yet (SGLang counts them as ``extra_reserved_reqs``): an AFTER hook on ``_pre_alloc`` keeps
them until the next pass.
"""

from __future__ import annotations

from typing import Any

from runtime_ext.admission.budget import sequence
from runtime_ext.state import AdmissionStats

QUEUE = "sglang.srt.disaggregation.decode.DecodePreallocQueue"
PASS_ATTR = "_structserve_pass_reqs"


def held_tokens(req: Any) -> int:
    """KV tokens a decode-side request holds: its preallocated prompt, plus what it decoded."""
    kv = req.kv
    return int(max(getattr(kv, "kv_allocated_len", 0) or 0, getattr(kv, "kv_committed_len", 0) or 0))


def outstanding_tokens(reqs: Any, page_size: int, ratio: float) -> int:
    return sum(sequence(req, held_tokens(req), ratio).outstanding_pages(page_size) for req in reqs) * page_size


def held_requests(queue: Any) -> list:
    """Every request whose pages decode has promised: running, transferring, waiting to join the
    batch, preallocated in this pass, and the last prebuilt batch (in no queue for one step)."""
    scheduler = queue.scheduler
    reqs = [*scheduler.running_batch.reqs]
    reqs += [d.req for d in queue.transfer_queue.queue if not d.host_staged]
    reqs += list(scheduler.waiting_queue)
    reqs += getattr(queue, PASS_ATTR, [])
    last = scheduler.last_batch
    if last is not None and last.forward_mode.is_prebuilt():
        reqs += list(last.reqs)
    unique = {id(r): r for r in reqs}  # a request seen in two places is counted once
    return list(unique.values())


def register(hooks: Any, hook_type: Any, stats: AdmissionStats) -> None:
    """Hooks for ``budget`` (a no-op on schedulers that are not PD decode: they never call them)."""

    def reserved(original: Any, queue: Any, *args: Any, **kwargs: Any) -> int:
        page = queue.token_to_kv_pool_allocator.page_size
        return outstanding_tokens(held_requests(queue), page, stats.reserve_ratio)

    def required(original: Any, queue: Any, req: Any, allocated_tokens: int, prefix_len: int, *args: Any) -> int:
        page = queue.token_to_kv_pool_allocator.page_size
        seq = sequence(req, prefix_len, stats.reserve_ratio)  # its matched prefix: held, not reserved again
        return max(seq.outstanding_pages(page) * page, int(allocated_tokens))

    def new_pass(original: Any, queue: Any, *args: Any, **kwargs: Any) -> Any:
        setattr(queue, PASS_ATTR, [])
        try:
            return original(queue, *args, **kwargs)
        finally:
            setattr(queue, PASS_ATTR, [])

    def remember(result: Any, queue: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
        getattr(queue, PASS_ATTR, []).append(req)
        return result

    hooks.register(f"{QUEUE}._active_reserved_tokens", reserved, hook_type.AROUND)
    hooks.register(f"{QUEUE}._required_admission_tokens", required, hook_type.AROUND)
    hooks.register(f"{QUEUE}.pop_preallocated", new_pass, hook_type.AROUND)
    hooks.register(f"{QUEUE}._pre_alloc", remember, hook_type.AFTER)

"""The decode replica's transfer admission under ``scheduling.admission: budget``: SGLang
0.5.23's own ``DecodePreallocQueue`` arithmetic (``_allocatable_token_budgets``,
``_required_admission_tokens``, the allocator's ``prealloc_fits``) on a minimal queue, with and
without ``runtime_ext.admission.decode_prealloc``'s hooks. A request is a prompt that has
arrived (its prompt KV preallocated) and may write ``max_new`` tokens."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sglang.srt.disaggregation import decode
from sglang.srt.disaggregation.decode import DecodePreallocQueue
from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

from runtime_ext.admission import decode_prealloc
from runtime_ext.state import AdmissionStats

POOL = 2048


@pytest.fixture(autouse=True)
def decode_config(monkeypatch):
    """The published ``disagg`` namespace the methods read: SGLang's default, no radix cache on decode."""
    monkeypatch.setattr(decode, "get_disagg", lambda: SimpleNamespace(disaggregation_decode_enable_radix_cache=False))


class Hooks:
    """HookRegistry's AROUND calling convention, kept in a dict instead of patching the class."""

    def __init__(self) -> None:
        self.around: dict[str, object] = {}

    def register(self, target: str, fn: object, kind: str) -> None:
        self.around[target.rsplit(".", 1)[1]] = (fn, kind)


def req(prompt: int, max_new: int, held: int | None = None) -> SimpleNamespace:
    held = prompt if held is None else held
    return SimpleNamespace(
        origin_input_ids=[0] * prompt,
        output_ids=[0] * (held - prompt),
        sampling_params=SimpleNamespace(max_new_tokens=max_new),
        kv=SimpleNamespace(kv_allocated_len=held, kv_committed_len=held),
    )


class Queue:
    """What SGLang's admission methods read of a ``DecodePreallocQueue`` (one full-attention
    pool, page 1, no radix cache on decode, nothing retracted)."""

    _allocatable_token_budgets = DecodePreallocQueue._allocatable_token_budgets
    _need_space_for_single_req = DecodePreallocQueue._need_space_for_single_req
    _active_req_count = DecodePreallocQueue._active_req_count
    _rebootstrap_prefill_len = staticmethod(DecodePreallocQueue._rebootstrap_prefill_len)
    _prealloc_reservation_fits = DecodePreallocQueue._prealloc_reservation_fits
    num_reserved_decode_tokens = 512

    def __init__(self, budget: bool) -> None:
        self.hooks: dict = {}
        if budget:
            registry = Hooks()
            decode_prealloc.register(registry, SimpleNamespace(AROUND="around", AFTER="after"), AdmissionStats())
            self.hooks = registry.around
        alloc = SimpleNamespace(page_size=1, available_size=lambda: POOL - self.used())
        alloc.prealloc_fits = lambda *a, **kw: BaseTokenToKVPoolAllocator.prealloc_fits(alloc, *a, **kw)
        self.token_to_kv_pool_allocator = alloc
        self.tree_cache = None
        self.retracted_queue: list = []
        self.transfer_queue = SimpleNamespace(queue=[])
        self.scheduler = SimpleNamespace(
            running_batch=SimpleNamespace(reqs=[]), waiting_queue=[], last_batch=None, enable_hisparse=False
        )

    def used(self) -> int:
        reqs = [*self.scheduler.running_batch.reqs, *(d.req for d in self.transfer_queue.queue)]
        return sum(r.kv.kv_allocated_len for r in reqs)

    def _uses_swa_reservation(self) -> bool:
        return False

    def _call(self, name: str, *args, **kwargs):
        original = getattr(DecodePreallocQueue, name)
        if name in self.hooks:
            fn, _ = self.hooks[name]
            return fn(lambda *a, **k: original(*a, **k), self, *args, **kwargs)
        return original(self, *args, **kwargs)

    def _active_reserved_tokens(self, *args, **kwargs) -> int:
        return self._call("_active_reserved_tokens", *args, **kwargs)

    def _required_admission_tokens(self, *args) -> int:
        return self._call("_required_admission_tokens", *args)

    def admits(self, candidate: SimpleNamespace) -> bool:
        """``pop_preallocated``'s decision for one candidate (no radix cache: prefix 0)."""
        retractable = sum(len(r.origin_input_ids) + len(r.output_ids) for r in self.scheduler.running_batch.reqs)
        budget = self._allocatable_token_budgets(retractable_tokens=retractable, count_retracted=True)
        prompt = len(candidate.origin_input_ids)
        need = self._required_admission_tokens(candidate, prompt, 0, retractable)
        return self._prealloc_reservation_fits(need, 0, full_allocatable_tokens=budget, swa_allocatable_tokens=None)

    def offer(self, reqs: list) -> int:
        """Admit in FIFO order until one does not fit (as ``pop_preallocated`` breaks)."""
        admitted = 0
        for r in reqs:
            if not self.admits(r):
                break
            self.transfer_queue.queue.append(SimpleNamespace(req=r, host_staged=False))
            admitted += 1
        return admitted


def worst(reqs: list) -> int:
    return sum(len(r.origin_input_ids) + r.sampling_params.max_new_tokens + 1 for r in reqs)


def test_sglang_admits_long_requests_beyond_the_pool_and_the_budget_does_not() -> None:
    offered = [req(20, 900) for _ in range(3)]
    sglang, budget = Queue(budget=False), Queue(budget=True)
    assert sglang.offer(offered) == 3  # 512 tokens reserved per request, whatever max_tokens says
    assert worst(offered) > POOL  # ... so three that may write 920 each are admitted into 2048
    assert budget.offer(offered) == 2
    assert worst(offered[:2]) <= POOL


def test_the_budget_counts_what_running_requests_may_still_write() -> None:
    running = [req(20, 900, held=500)]  # 421 tokens still to come (the +1: one overlap step)
    sglang, budget = Queue(budget=False), Queue(budget=True)
    sglang.scheduler.running_batch.reqs = budget.scheduler.running_batch.reqs = running
    assert budget.admits(req(20, 1100))  # 421 + 1121 <= 2048 - 500
    assert not budget.admits(req(20, 1110))
    assert sglang.admits(req(20, 1500))  # its 500 held tokens counted as retractable
    assert worst([*running, req(20, 1500)]) > POOL


@pytest.mark.parametrize("where", ["transfer", "waiting", "pass", "prebuilt"])
def test_every_request_decode_has_promised_pages_is_counted(where: str) -> None:
    queue, held = Queue(budget=True), req(20, 1000)
    if where == "transfer":
        queue.transfer_queue.queue.append(SimpleNamespace(req=held, host_staged=False))
    elif where == "waiting":
        queue.scheduler.waiting_queue.append(held)
    elif where == "pass":
        setattr(queue, decode_prealloc.PASS_ATTR, [held])
    else:
        queue.scheduler.last_batch = SimpleNamespace(
            reqs=[held], forward_mode=SimpleNamespace(is_prebuilt=lambda: True)
        )
    assert decode_prealloc.held_requests(queue) == [held]
    assert not queue.admits(req(20, 1100))  # 1001 outstanding + 1121 > 2048 - 0 held elsewhere


def test_sglang_reserve_is_kept_when_it_is_larger() -> None:
    """Short requests: SGLang's own ``need_space_for_single_req``/512 terms still apply."""
    queue = Queue(budget=True)
    assert queue._required_admission_tokens(req(20, 4), 700, 0, 0) == 700  # the preallocation itself

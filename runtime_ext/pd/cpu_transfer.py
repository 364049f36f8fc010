"""Gap: SGLang 0.5.23's prefill side of PD disaggregation assumes CUDA in two places that every
Mooncake transfer on a CPU engine reaches (``sglang/srt/disaggregation/prefill.py``):

1. ``send_kv_chunk``: a sender with ``supports_host_tensor_indices`` (Mooncake's) copies the page
   indices into *pinned* host memory and records a ``torch.cuda.Event`` so the transfer worker
   waits for the device-to-host copy. Without a CUDA driver both raise ("Found no NVIDIA
   driver"), so no KV chunk is ever sent and every request fails on the prefill side.
2. ``maybe_send_cached_prefix_chunk`` (on by default, ``SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX``):
   under the overlap scheduler, a radix-cache hit sends the cached prefix early and records a
   ``torch.cuda.Event`` on the forward stream first, so the transfer waits for the previous
   forward's writes.

Fix (AROUND hooks, only when the scheduler's device is ``cpu``): (1) the request's sender takes
SGLang's other branch, ``kv_to_page_indices`` (host indices, no copy to wait for); the Mooncake
worker accepts either. (2) the early send runs with the overlap flag off for that call: on the
CPU a forward runs synchronously on the scheduler thread, so the previous forward's writes are
complete when this runs and there is nothing to wait for. An NPU or GPU deployment needs neither
(the hooks do nothing there): its device has the events and pinned memory SGLang uses.
"""

from __future__ import annotations

import os
from typing import Any

PREFILL_MIXIN = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin"
SEND_KV_CHUNK = f"{PREFILL_MIXIN}.send_kv_chunk"
EARLY_SEND = f"{PREFILL_MIXIN}.maybe_send_cached_prefix_chunk"


def _on_cpu(scheduler: Any) -> bool:
    return str(getattr(scheduler, "device", "")) == "cpu"


def send_with_host_indices(original: Any, scheduler: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang's ``send_kv_chunk``; on the CPU the sender does not take the pinned-copy + CUDA
    event branch (an instance attribute shadows the sender class's ``True``)."""
    sender = getattr(req, "disagg_kv_sender", None)
    if _on_cpu(scheduler) and getattr(sender, "supports_host_tensor_indices", False):
        sender.supports_host_tensor_indices = False
    return original(scheduler, req, *args, **kwargs)


def early_send_without_event(original: Any, scheduler: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang's early cached-prefix send; on the CPU without the CUDA event (the forward that
    wrote the prefix has already returned)."""
    if not (_on_cpu(scheduler) and getattr(scheduler, "enable_overlap", False)):
        return original(scheduler, *args, **kwargs)
    scheduler.enable_overlap = False
    try:
        return original(scheduler, *args, **kwargs)
    finally:
        scheduler.enable_overlap = True


# SGLang's own behaviour for the named fixes (comma-separated: send_kv_chunk, early_send), to show the gap
OFF_ENV = "STRUCTSERVE_PD_CPU_FIXES_OFF"


def register(hooks: Any, hook_type: Any) -> None:
    off = set(os.environ.get(OFF_ENV, "").split(","))
    if "send_kv_chunk" not in off:
        hooks.register(SEND_KV_CHUNK, send_with_host_indices, hook_type.AROUND)
    if "early_send" not in off:
        hooks.register(EARLY_SEND, early_send_without_event, hook_type.AROUND)

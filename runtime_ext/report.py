"""The scheduler's report: what the runtime_ext plugin says about itself from inside an SGLang
scheduler process, as one typed record both sides share (pure logic: no torch, no sglang).

The scheduler builds it (``runtime_ext.plugin``: ``plugin_report`` and the internal-state hook) and
sends ``to_wire()``, a JSON-able dict, through SGLang's internal-state RPC under
``INTERNAL_STATE_KEY``; the service reads each rank's back with ``SchedulerReport.from_wire``
(``service/engine.py``) and merges data-parallel ranks with ``merged`` (``runtime_ext.report_merge``).

- ``serving`` (``KVServing``): what serves K/V, read from the scheduler's live objects when the
  report is built there (the pool's class, what its buffers store, the quant method the pool
  holds, the attention backend's class); None outside a scheduler.
- ``kv_cache``: the method that serves K/V: ``serving.quant_method`` when ``serving`` was read,
  the KV hook state's name otherwise.
- ``sections``: each subsystem's counters and settings by name (``SECTIONS``), as nested
  dicts of numbers and strings: merged over ranks key by key, shown as gauges by ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

INTERNAL_STATE_KEY = "structserve_runtime_ext"  # the report's key in SGLang's internal state
SECTIONS = (
    "kv_kernel_calls",
    "kv_cache_stats",
    "quant",
    "prefix_cache",
    "admission",
    "attention",
    "grammar",
    "fast_forward",
    "decode_kernels",
    "pd",
    "kv_pool",
    "kv_census",
)
_SERVING = {  # wire key -> KVServing field
    "kv_pool_class": "pool_class",
    "kv_store_dtype": "store_dtype",
    "kv_quant_method": "quant_method",
    "attention_backend": "attention_backend",
}


class ReportError(ValueError):
    """A report that does not have the record's shape (names the key)."""


@dataclass(frozen=True)
class KVServing:
    """What serves K/V in a scheduler, read from its live objects (not from the configuration)."""

    pool_class: str  # e.g. MHATokenToKVPool, NPUMHATokenToKVPool
    store_dtype: str  # what the pool's buffers store: int8, bfloat16, float32
    quant_method: str  # the KV quant method the pool holds, "unquantized" without one
    attention_backend: str  # the model runner's backend class; hybrid: "Hybrid(prefill=..., decode=...)"


@dataclass(frozen=True)
class SchedulerReport:
    version: str
    pid: int
    registered: bool  # register() ran in this process (SGLang loaded the plugin here)
    kv_cache: str
    kv_rotation: str
    kv_kernels: str  # native or reference
    kv_kernels_reason: str = ""
    dp_rank: int = 0
    serving: KVServing | None = None
    sections: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None  # reading the live objects failed (the rest is still reported)

    def section(self, name: str) -> Any:
        """One section's counters (``{}`` when this report has none)."""
        if name not in SECTIONS:
            raise KeyError(f"unknown report section {name!r}; known: {', '.join(SECTIONS)}")
        return self.sections.get(name, {})

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able dict sent through SGLang's internal-state RPC (flat: one key per field or section)."""
        wire: dict[str, Any] = {
            "version": self.version,
            "pid": self.pid,
            "registered": self.registered,
            "kv_cache": self.kv_cache,
            "kv_rotation": self.kv_rotation,
            "kv_kernels": self.kv_kernels,
            "kv_kernels_reason": self.kv_kernels_reason,
            "dp_rank": self.dp_rank,
            **{name: self.sections[name] for name in SECTIONS if name in self.sections},
        }
        if self.serving is not None:
            wire.update({key: getattr(self.serving, attr) for key, attr in _SERVING.items()})
        if self.error is not None:
            wire["error"] = self.error
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> SchedulerReport:
        """The record from ``to_wire``'s dict; ``ReportError`` naming a missing or mistyped key."""
        serving = None
        if any(key in wire for key in _SERVING):
            serving = KVServing(**{attr: _typed(wire, key, str) for key, attr in _SERVING.items()})
        error = wire.get("error")
        return cls(
            version=_typed(wire, "version", str),
            pid=_typed(wire, "pid", int),
            registered=_typed(wire, "registered", bool),
            kv_cache=_typed(wire, "kv_cache", str),
            kv_rotation=_typed(wire, "kv_rotation", str),
            kv_kernels=_typed(wire, "kv_kernels", str),
            kv_kernels_reason=str(wire.get("kv_kernels_reason", "")),
            dp_rank=int(wire.get("dp_rank") or 0),
            serving=serving,
            sections={name: wire[name] for name in SECTIONS if name in wire},
            error=None if error is None else str(error),
        )


def _typed(wire: Mapping[str, Any], key: str, kind: type) -> Any:
    if key not in wire:
        raise ReportError(f"the scheduler report lacks {key!r}")
    value = wire[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ReportError(f"the scheduler report's {key!r} is {value!r}, not {kind.__name__}")
    return value

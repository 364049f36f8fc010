"""The plugin's per-process state, as types (pure logic: no torch, no sglang).

``runtime_ext.plugin`` owns the one ``PluginState`` of a process and hands each capability
its part when it registers (the KV hooks their ``KVCacheState``, the quantization methods
their ``QuantStats``, the prefix cache its ``PrefixStats``, the attention backend its
``AttentionStats``); the plugin report reads it back.
No plugin module keeps mutable state of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class KVCacheState:
    """What the KV hooks saw: the configured method name, the model dtype, the method built."""

    name: str | None = None
    model_dtype: Any = None
    built: Any = None  # the runtime_ext KV method SGLang's pool was built with

    def method_name(self) -> str:
        """The KV method this process's pool was built with ("unquantized" unless one of ours)."""
        return self.built.name if self.built is not None else "unquantized"

    def rotation(self) -> str:
        """Which of K/V the built method stores Hadamard-rotated ("none" without one of ours)."""
        return self.built.rotation.which if self.built is not None else "none"

    def kernels(self) -> str:
        """What reads the C8 rows: ``native`` (compiled), ``reference`` (torch), a device ("none" without C8)."""
        return self.built.kernels() if self.built is not None else "none"

    def method_stats(self) -> dict[str, Any]:
        """Side-buffer statistics of the built method (outlier rate etc.; empty if none)."""
        return self.built.stats() if self.built is not None else {}


@dataclass
class QuantStats:
    """Modules quantized / kept, matmuls by path, linear-weight bytes as stored vs in the model
    dtype; ``monitor``: the online monitor's controller (``runtime_ext.quant.fallback``) when on."""

    quantized: int = 0
    kept: int = 0
    int8_calls: int = 0
    copy_calls: int = 0
    standby_calls: int = 0  # matmuls on a monitor's high-precision standby copy (the whole batch)
    standby_rows_calls: int = 0  # matmuls that recomputed a flagged request's rows on that copy
    weight_bytes: int = 0
    weight_bytes_unquantized: int = 0
    monitor: Any = field(default=None, repr=False, compare=False)

    def count_bytes(self, stored: int, unquantized: int) -> None:
        self.weight_bytes += stored
        self.weight_bytes_unquantized += unquantized

    def report(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "monitor"}
        if self.monitor is not None:
            out["monitor"] = self.monitor.report()
        return out


@dataclass
class PrefixStats:
    """The combined prefix cache's counters (``backend`` None until it is built)."""

    backend: str | None = None
    combine_blocks: int = 0
    hit_tokens: int = 0
    miss_tokens: int = 0
    abandoned_pages: int = 0
    evicted_tokens: int = 0
    draft_dropped_pages: int = 0

    def report(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AttentionStats:
    """Which attention backend SGLang's ``torch_native`` name builds here (``structserve``,
    ``per_request`` or ``sglang``: ``RuntimeExtConfig.attention``), how many decode attention
    calls (one per layer per step) took each of runtime_ext's paths, and how many extend tokens
    ran as decode rows (a mixed step's running decodes, forced spans: ``attention.native``)."""

    impl: str = "sglang"
    batched_decode_calls: int = 0
    per_request_decode_calls: int = 0
    extend_decode_rows: int = 0

    def report(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GrammarStats:
    """Grammars SGLang's grammar backend built in this scheduler, per library (each one a
    tokenizer-bound compile; SGLang's cache hits are not counted), the seconds they took, and
    the llguidance grammars served by xgrammar instead, per reason (``runtime_ext.grammar_route``)."""

    compiles: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    fallbacks: dict[str, int] = field(default_factory=dict)

    def observe(self, library: str, seconds: float) -> None:
        self.compiles[library] = self.compiles.get(library, 0) + 1
        self.seconds[library] = self.seconds.get(library, 0.0) + seconds

    def fallback(self, reason: str) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def report(self) -> dict[str, Any]:
        seconds = {k: round(v, 6) for k, v in self.seconds.items()}
        return {"compiles": dict(self.compiles), "seconds": seconds, "fallbacks": dict(self.fallbacks)}


QUEUE_TIME_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class AdmissionStats:
    """The scheduler's admission and retraction counters (``runtime_ext.admission``).

    ``retracted_tokens``: KV tokens dropped when SGLang retracted running requests;
    ``recomputed_tokens``: tokens prefilled again when those requests were re-admitted (less
    than dropped when the prefix cache still held some). ``budget_holds``: times the budget
    kept the head of the queue waiting. Queue time: from the scheduler's queue to first
    admission, as cumulative-bucket counts (``QUEUE_TIME_BUCKETS``, seconds)."""

    policy: str = "sglang"
    reserve_ratio: float = 1.0
    retractions: int = 0
    retracted_requests: int = 0
    retracted_tokens: int = 0
    recomputed_tokens: int = 0
    budget_holds: int = 0
    admitted: int = 0
    reused_tokens: int = 0  # prefix-cache tokens admitted requests matched (not reserved again)
    queue_time_counts: list[int] = field(default_factory=lambda: [0] * len(QUEUE_TIME_BUCKETS))
    queue_time_sum: float = 0.0

    def observe_queue_time(self, seconds: float) -> None:
        self.admitted += 1
        self.queue_time_sum += seconds
        for i, bound in enumerate(QUEUE_TIME_BUCKETS):
            if seconds <= bound:
                self.queue_time_counts[i] += 1

    def report(self) -> dict[str, Any]:
        out = asdict(self)
        out["queue_time_buckets"] = list(QUEUE_TIME_BUCKETS)
        return out


@dataclass
class PluginState:
    kv_cache: KVCacheState = field(default_factory=KVCacheState)
    quant: QuantStats = field(default_factory=QuantStats)
    prefix_cache: PrefixStats = field(default_factory=PrefixStats)
    admission: AdmissionStats = field(default_factory=AdmissionStats)
    attention: AttentionStats = field(default_factory=AttentionStats)
    grammar: GrammarStats = field(default_factory=GrammarStats)
    registered_pids: set[int] = field(default_factory=set)

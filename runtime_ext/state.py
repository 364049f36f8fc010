"""The plugin's per-process state, as types (pure logic: no torch, no sglang).

``runtime_ext.plugin`` owns the one ``PluginState`` of a process and hands each capability
its part when it registers (the KV hooks their ``KVCacheState``, the quantization methods
their ``QuantStats``, the prefix cache its ``PrefixStats``); the plugin report reads it back.
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

    def method_stats(self) -> dict:
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

    def report(self) -> dict:
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

    def report(self) -> dict:
        return asdict(self)


@dataclass
class PluginState:
    kv_cache: KVCacheState = field(default_factory=KVCacheState)
    quant: QuantStats = field(default_factory=QuantStats)
    prefix_cache: PrefixStats = field(default_factory=PrefixStats)
    registered_pids: set[int] = field(default_factory=set)

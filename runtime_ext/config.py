"""``RuntimeExtConfig``: the one channel from the service to SGLang's scheduler processes
(pure logic: no torch, no sglang).

SGLang starts its scheduler in fresh processes; the only thing they inherit from the service
is the environment. The service builds one ``RuntimeExtConfig`` at startup and writes it
(``export``) before the engine starts; every reader inside the scheduler calls
``RuntimeExtConfig.from_env()``. The environment variable names live here and nowhere else.

Knobs:
- ``kv_calibration``: the static C8 scales file (``kv_cache: c8_static*``).
- ``kv_rotation``: which of K/V the C8 methods store Hadamard-rotated (``none``, ``k``, ``kv``;
  ``runtime_ext.kv_cache.rotation``), or ``auto``: ``kv`` for per-token scales (``c8_dynamic``),
  ``none`` for per-channel static scales (``resolve_rotation``; ``docs/benchmarks.md`` has why).
- ``quant_policy``: what the ``structserve_<scheme>`` linear methods quantize (None: the
  scheme's defaults).
- ``combine_blocks``: ``C`` of the ``structserve_combined`` prefix cache (match in units of C pages).
- ``prefix_events``: the JSON-lines event stream of the combined prefix cache (None: off).
- ``quant_monitor``: the online outlier monitor and layer fallback (``runtime_ext.quant.monitor``;
  None: off).
- ``admission``: ``sglang`` (SGLang's optimistic admission, with retraction) or ``budget``
  (worst-case KV pages reserved before a request runs; ``runtime_ext.admission``);
  ``reserve_ratio``: the share of ``max_new_tokens`` the budget reserves (1: the worst case).
- ``attention``: ``structserve`` (runtime_ext's ``torch_native`` backend, batched decode),
  ``per_request`` (the same backend with its per-request decode loop: the reference the batched
  decode is tested and measured against) or ``sglang`` (the upstream one, for A/B measurements).
- ``kv_kernels``: ``native`` (the C8 KV store and read compiled for this CPU, ``runtime_ext.ops.kv_cpu``;
  equal to the reference) or ``reference`` (the torch reference only, for A/B measurements). Like
  ``attention`` it has no service setting: the environment's value is kept.
- ``decode_kernels``: ``native`` (on the CPU: bfloat16 linear layers of 1-64 rows, decode attention
  over the bf16 pool, RMSNorm and RoPE, seeded sampling through the compiled loops of
  ``runtime_ext.ops.linear_cpu`` / ``attention_cpu`` / ``norm_cpu`` / ``sample_cpu``; equal to torch's up
  to float32 summation order, RoPE bit for bit, the draws SGLang's) or ``reference`` (torch only, for
  A/B measurements). No service setting either.
- ``fast_forward``: tokens an llguidance grammar forces are appended and computed in one extend
  step instead of one decode step each (``runtime_ext.grammar_fast_forward``).
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, TypeVar

from runtime_ext.quant.monitor import MonitorConfig
from runtime_ext.quant.policy import QuantPolicy

AttentionImpl = Literal["structserve", "per_request", "sglang"]
ATTENTION_IMPLS: tuple[AttentionImpl, ...] = ("structserve", "per_request", "sglang")
KVRotation = Literal["auto", "none", "k", "kv"]
StoredRotation = Literal["none", "k", "kv"]
KV_ROTATIONS: tuple[KVRotation, ...] = ("auto", "none", "k", "kv")
DEFAULT_KV_ROTATION: KVRotation = "auto"
KVKernels = Literal["native", "reference"]
KV_KERNELS: tuple[KVKernels, ...] = ("native", "reference")


def resolve_rotation(rotation: KVRotation, kv_cache: str) -> StoredRotation:
    """What a C8 method of ``kv_cache`` stores rotated. ``auto``: K and V for per-token scales
    (rotation spreads a key's outlier channels over the head dim: clearly better, measured);
    nothing for static per-channel scales (measured within noise either way; unrotated keeps the
    calibration files made before rotation valid)."""
    if rotation == "auto":
        return "kv" if kv_cache == "c8_dynamic" else "none"
    return rotation


_KV_CALIBRATION = "STRUCTSERVE_KV_CALIBRATION"  # also the settings variable for kv_calibration
_QUANT = "STRUCTSERVE_QUANT"
_COMBINE_BLOCKS = "STRUCTSERVE_COMBINE_BLOCKS"
_PREFIX_EVENTS = "STRUCTSERVE_PREFIX_EVENTS"
_ATTENTION = "STRUCTSERVE_ATTENTION"
_QUANT_MONITOR = "STRUCTSERVE_QUANT_MONITOR"
_KV_ROTATION = "STRUCTSERVE_KV_ROTATION"  # also the settings variable for kv_rotation
_ADMISSION = "STRUCTSERVE_RUNTIME_ADMISSION"
_RESERVE_RATIO = "STRUCTSERVE_RUNTIME_RESERVE_RATIO"
_KV_KERNELS = "STRUCTSERVE_KV_KERNELS"
_FAST_FORWARD = "STRUCTSERVE_GRAMMAR_FAST_FORWARD"
_DECODE_KERNELS = "STRUCTSERVE_DECODE_KERNELS"
ENV_NAMES = (
    _KV_CALIBRATION,
    _QUANT,
    _COMBINE_BLOCKS,
    _PREFIX_EVENTS,
    _ATTENTION,
    _QUANT_MONITOR,
    _KV_ROTATION,
    _ADMISSION,
    _RESERVE_RATIO,
    _KV_KERNELS,
    _FAST_FORWARD,
    _DECODE_KERNELS,
)
Admission = Literal["sglang", "budget"]
ADMISSIONS: tuple[Admission, ...] = ("sglang", "budget")
Choice = TypeVar("Choice", bound=str)


class RuntimeConfigError(ValueError):
    """The scheduler process lacks a setting it needs (names what is missing)."""


@dataclass(frozen=True)
class RuntimeExtConfig:
    kv_calibration: Path | None = None
    quant_policy: QuantPolicy | None = None
    combine_blocks: int = 1
    prefix_events: Path | None = None
    attention: AttentionImpl = "structserve"
    quant_monitor: MonitorConfig | None = None
    kv_rotation: KVRotation = DEFAULT_KV_ROTATION
    admission: Admission = "sglang"
    reserve_ratio: float = 1.0
    kv_kernels: KVKernels = "native"
    fast_forward: bool = False
    decode_kernels: KVKernels = "native"

    def require_kv_calibration(self) -> Path:
        if self.kv_calibration is None:
            raise RuntimeConfigError(f"a static C8 KV cache needs its calibration file ({_KV_CALIBRATION} unset)")
        return self.kv_calibration

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry this config (unset knobs are absent)."""
        env = {
            _COMBINE_BLOCKS: str(self.combine_blocks),
            _ATTENTION: self.attention,
            _KV_ROTATION: self.kv_rotation,
            _ADMISSION: self.admission,
            _RESERVE_RATIO: repr(self.reserve_ratio),
            _KV_KERNELS: self.kv_kernels,
            _FAST_FORWARD: "1" if self.fast_forward else "0",
            _DECODE_KERNELS: self.decode_kernels,
        }
        if self.kv_calibration is not None:
            env[_KV_CALIBRATION] = str(self.kv_calibration)
        if self.quant_policy is not None:
            env[_QUANT] = self.quant_policy.to_json()
        if self.prefix_events is not None:
            env[_PREFIX_EVENTS] = str(self.prefix_events)
        if self.quant_monitor is not None:
            env[_QUANT_MONITOR] = json.dumps(asdict(self.quant_monitor))
        return env

    def export(self, environ: MutableMapping[str, str] = os.environ) -> None:
        """Write this config to ``environ`` (the scheduler processes inherit it); clears unset knobs."""
        env = self.to_env()
        for name in ENV_NAMES:
            if name in env:
                environ[name] = env[name]
            else:
                environ.pop(name, None)

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] = os.environ) -> RuntimeExtConfig:
        calibration, quant, events = environ.get(_KV_CALIBRATION), environ.get(_QUANT), environ.get(_PREFIX_EVENTS)
        return cls(
            kv_calibration=Path(calibration) if calibration else None,
            quant_policy=QuantPolicy.from_json(quant) if quant else None,
            combine_blocks=int(environ.get(_COMBINE_BLOCKS, "1")),
            prefix_events=Path(events) if events else None,
            attention=_one_of(_ATTENTION, environ.get(_ATTENTION, "structserve"), ATTENTION_IMPLS),
            quant_monitor=MonitorConfig(**json.loads(monitor)) if (monitor := environ.get(_QUANT_MONITOR)) else None,
            kv_rotation=_one_of(_KV_ROTATION, environ.get(_KV_ROTATION, DEFAULT_KV_ROTATION), KV_ROTATIONS),
            admission=_one_of(_ADMISSION, environ.get(_ADMISSION, "sglang"), ADMISSIONS),
            reserve_ratio=float(environ.get(_RESERVE_RATIO, "1.0")),
            kv_kernels=_one_of(_KV_KERNELS, environ.get(_KV_KERNELS, "native"), KV_KERNELS),
            fast_forward=environ.get(_FAST_FORWARD, "0") == "1",
            decode_kernels=_one_of(_DECODE_KERNELS, environ.get(_DECODE_KERNELS, "native"), KV_KERNELS),
        )


def _one_of(variable: str, value: str, known: tuple[Choice, ...]) -> Choice:
    """``value`` as one of the ``known`` literals, or a RuntimeConfigError naming the variable."""
    for choice in known:
        if value == choice:
            return choice
    raise RuntimeConfigError(f"{variable}={value!r}; valid: {', '.join(known)}")

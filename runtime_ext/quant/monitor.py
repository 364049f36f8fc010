"""The online outlier monitor's logic (pure: no torch, no sglang).

Per quantized linear module (SGLang's name, e.g. ``model.layers.3.self_attn.qkv_proj``) the
scheduler measures each token's input absmax ``a``. ``LayerMonitor`` keeps:
- running statistics of ``a`` since startup (Welford/Chan: count, mean, M2), never reset;
- the current window's tokens and outliers: ``a > mean + sigma · σ``, judged against the
  statistics as they stood before the step (a layer's first ``warmup_tokens`` count no outliers).

``decide`` is the rule: a layer whose window holds at least ``min_window_tokens`` tokens and an
outlier share above ``rate_threshold`` falls back to high precision. Windows end every
``window_requests`` requests (``Monitor.count_requests``), then the counts start again.

The kernels (``runtime_ext.quant.fallback``) hand one ``StepStats`` per layer per scheduler step:
the sums of the batch, read from the device once per step.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping

from runtime_ext.quant.policy import shards

Granularity = Literal["layer", "request"]


class MonitorConfigError(ValueError):
    """A monitor setting that cannot be used (names the key)."""


@dataclass(frozen=True)
class MonitorConfig:
    enabled: bool = False
    sigma: float = 4.0
    rate_threshold: float = 0.01
    window_requests: int = 1000
    min_window_tokens: int = 256
    warmup_tokens: int = 256
    granularity: Granularity = "layer"
    reload_interval_s: float = 30.0
    max_fallback_bytes: int = 0  # standby copies beyond the layers the policy keeps (0: none)
    sensitive_layers: str | None = None  # the file to watch (quant.sensitive_layers)
    events_path: str | None = None  # JSON lines: each fallback and reload
    standby: tuple[str, ...] = ()  # SGLang modules that keep a high-precision copy (standby_plan)
    min_request_tokens: int = 32  # granularity request: a request decides nothing before this many tokens

    def __post_init__(self) -> None:
        object.__setattr__(self, "standby", tuple(self.standby))
        checks = {
            "sigma": self.sigma > 0,
            "rate_threshold": 0 <= self.rate_threshold < 1,
            "window_requests": self.window_requests >= 1,
            "min_window_tokens": self.min_window_tokens >= 1,
            "warmup_tokens": self.warmup_tokens >= 2,
            "reload_interval_s": self.reload_interval_s > 0,
            "max_fallback_bytes": self.max_fallback_bytes >= 0,
        }
        if self.granularity not in ("layer", "request"):
            raise MonitorConfigError(f"quant.monitor.granularity={self.granularity!r}: use 'layer' or 'request'")
        if self.min_request_tokens < 1:
            raise MonitorConfigError(f"quant.monitor.min_request_tokens={self.min_request_tokens} is out of range")
        for key, ok in checks.items():
            if not ok:
                raise MonitorConfigError(f"quant.monitor.{key}={getattr(self, key)!r} is out of range")


@dataclass(frozen=True)
class StepStats:
    """One layer's tokens in one step: count, Σa, Σa², and how many exceeded the threshold."""

    tokens: int
    total: float
    squares: float
    outliers: int


@dataclass
class LayerMonitor:
    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    window_tokens: int = 0
    window_outliers: int = 0

    def std(self) -> float:
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else 0.0

    def threshold(self, sigma: float, warmup_tokens: int) -> float:
        """The absmax above which a token is an outlier (inf while warming up)."""
        return self.mean + sigma * self.std() if self.count >= warmup_tokens else math.inf

    def add(self, step: StepStats) -> None:
        """Count the step's outliers in the window, then merge its tokens into the running
        statistics (Chan et al.'s parallel update)."""
        if step.tokens <= 0:
            return
        self.window_tokens += step.tokens
        self.window_outliers += step.outliers
        mean_b = step.total / step.tokens
        m2_b = max(0.0, step.squares - step.tokens * mean_b * mean_b)
        n = self.count + step.tokens
        delta = mean_b - self.mean
        self.mean += delta * step.tokens / n
        self.m2 += m2_b + delta * delta * self.count * step.tokens / n
        self.count = n

    def rate(self) -> float:
        return self.window_outliers / self.window_tokens if self.window_tokens else 0.0

    def reset_window(self) -> None:
        self.window_tokens = self.window_outliers = 0


def decide(layers: Mapping[str, LayerMonitor], config: MonitorConfig, falling: Iterable[str] = ()) -> list[str]:
    """The layers that must fall back now: enough window tokens and an outlier share above the
    threshold, not already in ``falling`` (sorted by name)."""
    done = set(falling)
    return sorted(
        name
        for name, layer in layers.items()
        if name not in done and layer.window_tokens >= config.min_window_tokens and layer.rate() > config.rate_threshold
    )


@dataclass
class RequestTally:
    """One request's tokens so far and, per module, how many of them were outliers."""

    tokens: int = 0
    outliers: dict[str, int] = field(default_factory=dict)

    def add(self, tokens: int, outliers: Mapping[str, int]) -> None:
        self.tokens += tokens
        for module, count in outliers.items():
            self.outliers[module] = self.outliers.get(module, 0) + count


def decide_request(tally: RequestTally, config: MonitorConfig) -> tuple[str, float] | None:
    """Per-request granularity: the module whose outlier share over the request's tokens is
    highest, with that share, when it is above ``rate_threshold`` after ``min_request_tokens``
    tokens; else None. The request's remaining tokens then run in high precision."""
    if tally.tokens < config.min_request_tokens or not tally.outliers:
        return None
    module = max(sorted(tally.outliers), key=lambda name: tally.outliers[name])
    rate = tally.outliers[module] / tally.tokens
    return (module, rate) if rate > config.rate_threshold else None


@dataclass
class Monitor:
    """All layers' monitors plus the request window."""

    config: MonitorConfig
    layers: dict[str, LayerMonitor] = field(default_factory=dict)
    window_requests_seen: int = 0
    windows_closed: int = 0

    def thresholds(self, names: Iterable[str]) -> list[float]:
        return [
            self.layers.setdefault(n, LayerMonitor()).threshold(self.config.sigma, self.config.warmup_tokens)
            for n in names
        ]

    def add_step(self, steps: Mapping[str, StepStats]) -> None:
        for name, step in steps.items():
            self.layers.setdefault(name, LayerMonitor()).add(step)

    def count_requests(self, new_requests: int) -> bool:
        """Count requests that started; True when that closed a window (counts reset)."""
        self.window_requests_seen += new_requests
        if self.window_requests_seen < self.config.window_requests:
            return False
        self.window_requests_seen = 0
        self.windows_closed += 1
        for layer in self.layers.values():
            layer.reset_window()
        return True


def standby_plan(
    module_bytes: Mapping[str, int], kept: Iterable[str], ranking: Iterable[str], budget: int
) -> tuple[tuple[str, ...], int, int]:
    """Which modules keep a high-precision standby copy: ``(modules, kept_bytes, extra_bytes)``.

    Every ``kept`` module (the policy keeps it in high precision: it is served from that copy and
    a reload may quantize it) costs its bytes outside the budget; then the ``ranking`` (most
    sensitive first, the scan's KL) while the extra bytes stay within ``budget``."""
    chosen = [m for m in module_bytes if m in set(kept)]
    kept_bytes, extra = sum(module_bytes[m] for m in chosen), 0
    for module in ranking:
        size = module_bytes.get(module)
        if size is None or module in chosen or extra + size > budget:
            continue
        chosen.append(module)
        extra += size
    return tuple(chosen), kept_bytes, extra


def kl_ranking(modules: Iterable[str], scores: Mapping[str, Mapping[str, float]]) -> list[str]:
    """``modules`` most sensitive first: each by the largest KL (a scan's scores) of its
    checkpoint shards; stable, so name order where the scan has no score."""
    ordered = list(modules)
    rank = {m: max((scores.get(s, {}).get("kl", 0.0) for s in shards(m)), default=0.0) for m in ordered}
    return sorted(ordered, key=lambda m: -rank[m])


def modules_listed(layers: Iterable[str], modules: Iterable[str]) -> set[str]:
    """The SGLang modules (``...qkv_proj``) any of whose checkpoint shards (``...q_proj``) is
    in ``layers`` (a sensitive-layers file lists shards)."""
    listed = set(layers)
    return {m for m in modules if any(s in listed for s in shards(m))}


def reload_diff(
    from_file: Iterable[str], by_monitor: Iterable[str], wanted: Iterable[str], switchable: Iterable[str]
) -> tuple[list[str], list[str], list[str]]:
    """How a new sensitive-layers file changes the live set: ``(to_fallback, to_int8, unswitchable)``.

    ``from_file``: modules in high precision because the previous file listed them;
    ``by_monitor``: modules the monitor switched (they stay: the next scan folds them in);
    ``wanted``: the modules the new file lists; ``switchable``: modules holding a standby copy.
    A wanted module without one cannot switch: it is reported and served as it is."""
    file_now, monitor, want, can = set(from_file), set(by_monitor), set(wanted), set(switchable)
    to_fallback = (want - file_now - monitor) & can
    to_int8 = (file_now - want - monitor) & can
    return sorted(to_fallback), sorted(to_int8), sorted(want - can)


EVENT_KINDS = ("fallback", "reload", "reload_error", "unswitchable")


def event_line(kind: str, time: str, **fields: object) -> str:
    """One JSON line of the events file (``quant.monitor.events_path``).

    ``fallback``: module, layers (its checkpoint shards), granularity, rate, window_tokens,
    threshold, step, request (None at layer granularity); ``reload``: path, sha256, to_fallback,
    to_int8; ``reload_error``: path, error; ``unswitchable``: module, why."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown monitor event kind {kind!r}")
    return json.dumps({"kind": kind, "time": time, **fields}, sort_keys=True)


def read_events(lines: Iterable[str]) -> tuple[list[dict[str, object]], int]:
    """The events of a file's lines and how many lines were not events (torn or foreign)."""
    events, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(event, dict) and event.get("kind") in EVENT_KINDS:
            events.append(event)
        else:
            bad += 1
    return events, bad

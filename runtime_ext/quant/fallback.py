"""The online outlier monitor and per-layer fallback in the scheduler process (imports torch).

One ``FallbackController`` per process (``QuantStats.monitor``), built by the quantization
config when ``RuntimeExtConfig.quant_monitor`` is on. The logic is ``runtime_ext.quant.monitor``.
- ``attach(layer, prefix, starts_high)`` at load: the module gets an index, and, when the
  standby plan names it, ``standby_weight`` (its high-precision weight). A module the policy
  keeps starts on that copy (a reload may move it to its INT8 path).
- ``observe(layer, x)`` in ``apply``: the per-token absmax of the input (``abs().amax(-1)``, the
  cheapest form on CPU: 7 µs for 8 bf16 rows of 576 vs 18 µs for an inf-norm), kept on the
  device for the step. There is no host sync.
- ``step_end(forward_batch)`` after each forward (the ``_forward_raw`` AROUND hook). It stacks the
  step's absmax vectors, compares them with the modules' thresholds, and sums Σa, Σa² and the
  outliers for every module at once. That is the step's one host read. It then updates the
  statistics and counts new requests (windows), and switches the modules ``decide`` names.
  A re-read of the sensitive-layers file, when due, comes before the next forward.
Switching sets ``layer.use_standby`` between two forwards, so one matmul never mixes paths.
"""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from runtime_ext.quant.monitor import (
    Monitor,
    MonitorConfig,
    StepStats,
    decide,
    event_line,
    modules_listed,
    reload_diff,
)
from runtime_ext.quant.policy import shards
from runtime_ext.quant.request_rows import RequestRows
from runtime_ext.quant.sensitivity import MAX_FILE_BYTES, SensitiveLayersError, load_sensitive_layers

log = logging.getLogger(__name__)
_RECENT_RIDS = 65536  # request ids remembered to count each request once per window


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class FallbackController:
    def __init__(self, config: MonitorConfig) -> None:
        self.config, self.monitor = config, Monitor(config)
        self.layers: dict[str, Any] = {}  # module prefix -> the SGLang module (row order)
        self.pending: list[tuple[int, torch.Tensor]] = []  # (module index, per-token absmax) this step
        self.from_file: set[str] = set()  # on standby because the sensitive-layers file lists them
        self.by_monitor: set[str] = set()  # switched by the monitor
        self.unswitchable: set[str] = set()  # wanted high precision, hold no standby copy
        self.counters = dict.fromkeys(
            ("steps", "fallbacks", "request_fallbacks", "reloads", "reload_errors", "to_int8"), 0
        )
        self.requests = RequestRows(config) if config.granularity == "request" else None
        self._rids: dict[str, None] = {}
        self._digest = self._file_digest()
        self._next_check = time.monotonic() + config.reload_interval_s

    # --- load ---------------------------------------------------------------------------
    def attach(self, layer: Any, prefix: str, starts_high: bool) -> bool:
        """Register a quantized module; True when it keeps its high-precision weight (the
        caller must then not free it)."""
        layer.monitor_index, layer.use_standby = len(self.layers), False
        self.layers[prefix] = layer
        if prefix not in self.config.standby:
            return False
        layer.standby_weight = layer.weight.data
        if starts_high:
            layer.use_standby = True
            self.from_file.add(prefix)
        return True

    # --- forward ------------------------------------------------------------------------
    def begin_step(self, forward_batch: Any) -> None:
        """Before a forward: a due reload; per-request granularity: the rows of each request."""
        self.maybe_reload()
        if self.requests is not None:
            self.requests.begin(forward_batch)

    def observe(self, layer: Any, x: torch.Tensor) -> None:
        self.pending.append((layer.monitor_index, x.detach().abs().amax(dim=-1)))
        if self.requests is not None:
            self.requests.prepare(x.device)

    def row_mask(self, rows: int) -> torch.Tensor | None:
        """Per-request granularity: the rows of flagged requests in this forward (else None)."""
        return self.requests.row_mask(rows) if self.requests is not None else None

    def step_end(self, forward_batch: Any) -> None:
        """Once per forward: the statistics of every module (one host read), decisions."""
        if not self.pending:
            return
        self.counters["steps"] += 1
        steps = self._read_step()
        self.pending = []
        self.monitor.add_step(steps)
        if self.requests is not None:
            for rid, module, rate, tokens in self.requests.end():
                self._request_falls_back(rid, module, rate, tokens)
        else:
            for name in decide(self.monitor.layers, self.config, self.live() | self.unswitchable):
                self._fall_back(name)
        self.monitor.count_requests(self._new_requests(forward_batch))

    def _read_step(self) -> dict[str, StepStats]:
        """Σa, Σa² and outliers of each module observed this step, all modules in a few ops."""
        names, groups = list(self.layers), {}
        thresholds = self.monitor.thresholds(names)
        for index, a in self.pending:  # every module sees the batch's rows; group defensively
            groups.setdefault(a.numel(), []).append((index, a))
        steps: dict[str, StepStats] = {}
        for items in groups.values():
            indices = [i for i, _ in items]
            a = torch.stack([v for _, v in items]).float()
            limit = torch.tensor([thresholds[i] for i in indices], device=a.device)
            outliers = a > limit[:, None]
            sums = torch.stack((a.sum(1), a.square().sum(1), outliers.sum(1).float()), 1).tolist()
            for i, (total, squares, count) in zip(indices, sums):
                steps[names[i]] = StepStats(a.shape[1], total, squares, int(count))
            if self.requests is not None:
                self.requests.count([names[i] for i in indices], outliers)
        return steps

    def _new_requests(self, forward_batch: Any) -> int:
        rids = getattr(forward_batch, "rids", None) or []
        new = [rid for rid in rids if rid not in self._rids]
        for rid in new:
            self._rids[rid] = None
        while len(self._rids) > _RECENT_RIDS:
            del self._rids[next(iter(self._rids))]
        return len(new)

    # --- switching ----------------------------------------------------------------------
    def live(self) -> set[str]:
        """Modules serving from their high-precision copy now."""
        return {name for name, layer in self.layers.items() if layer.use_standby}

    def standby(self) -> set[str]:
        return {name for name, layer in self.layers.items() if hasattr(layer, "standby_weight")}

    def _fall_back(self, name: str) -> None:
        stats = self.monitor.layers[name]
        fields = {"module": name, "layers": shards(name), "rate": stats.rate(), "window_tokens": stats.window_tokens}
        if not hasattr(self.layers[name], "standby_weight"):
            self.unswitchable.add(name)
            self._event("unswitchable", **fields, why="no standby copy (raise quant.monitor.max_fallback_bytes)")
            return
        self.layers[name].use_standby = True
        self.by_monitor.add(name)
        self.counters["fallbacks"] += 1
        threshold = stats.threshold(self.config.sigma, self.config.warmup_tokens)
        log.warning("quant.monitor: %s falls back to high precision (outlier rate %.2f%%)", name, 100 * stats.rate())
        self._event(
            "fallback",
            **fields,
            granularity=self.config.granularity,
            threshold=threshold,
            step=self.counters["steps"],
            serving_from_step=self.counters["steps"] + 1,
            request=None,
        )

    def _request_falls_back(self, rid: str, module: str, rate: float, tokens: int) -> None:
        self.counters["request_fallbacks"] += 1
        log.warning(
            "quant.monitor: request %s continues in high precision (%s outlier rate %.2f%%)", rid, module, 100 * rate
        )
        self._event(
            "fallback",
            module=module,
            layers=shards(module),
            rate=rate,
            window_tokens=tokens,
            granularity="request",
            step=self.counters["steps"],
            serving_from_step=self.counters["steps"] + 1,
            request=rid,
        )

    # --- reload -------------------------------------------------------------------------
    def _file_digest(self) -> str | None:
        """The file's sha256, or what keeps it from being read (a changed state is acted on once)."""
        path = self.config.sensitive_layers
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                return hashlib.sha256(f.read(MAX_FILE_BYTES + 1)).hexdigest()
        except OSError as exc:
            return f"unreadable: {exc}"

    def maybe_reload(self, force: bool = False) -> None:
        """Re-read the sensitive-layers file when ``reload_interval_s`` has passed and its hash
        changed; a bad file keeps the live set (counted, logged, recorded)."""
        path = self.config.sensitive_layers
        if path is None or not (force or time.monotonic() >= self._next_check):
            return
        self._next_check = time.monotonic() + self.config.reload_interval_s
        digest = self._file_digest()
        if digest is None or digest == self._digest:
            return
        self._digest = digest  # a bad file is reported once, not every interval
        try:
            wanted = modules_listed(load_sensitive_layers(Path(path)), self.layers)
        except SensitiveLayersError as exc:
            self.counters["reload_errors"] += 1
            log.error("quant.monitor: keeping the current fallback set: %s", exc)
            self._event("reload_error", path=path, error=str(exc))
            return
        self._apply_reload(wanted, path, digest)

    def _apply_reload(self, wanted: set[str], path: str, digest: str) -> None:
        to_fallback, to_int8, unswitchable = reload_diff(self.from_file, self.by_monitor, wanted, self.standby())
        for name in to_fallback:
            self.layers[name].use_standby = True
        for name in to_int8:
            self.layers[name].use_standby = False
        self.from_file = (wanted & self.standby()) - self.by_monitor
        self.counters["reloads"] += 1
        self.counters["to_int8"] += len(to_int8)
        moved = len(to_fallback), len(to_int8)
        log.warning("quant.monitor: reloaded %s: %d to high precision, %d to INT8", path, *moved)
        self._event(
            "reload", path=path, sha256=digest, to_fallback=to_fallback, to_int8=to_int8, unswitchable=unswitchable
        )

    # --- report -------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> None:
        if self.config.events_path is None:
            return
        try:
            with open(self.config.events_path, "a") as f:
                f.write(event_line(kind, _now(), **fields) + "\n")
        except OSError as exc:  # an events file must never take the scheduler down
            log.error("quant.monitor: cannot write %s: %s", self.config.events_path, exc)

    def report(self) -> dict[str, Any]:
        live = self.live()
        layers = {
            name: {"rate": stats.rate(), "state": "fallback" if name in live else "int8"}
            for name, stats in self.monitor.layers.items()
        }
        for name in self.layers:
            layers.setdefault(name, {"rate": 0.0, "state": "fallback" if name in live else "int8"})
        return {
            **self.counters,
            "standby": len(self.standby()),
            "windows_closed": self.monitor.windows_closed,
            "layers": layers,
        }

"""One report from several schedulers' plugin reports (``engine.dp_size`` > 1).

Each data-parallel scheduler runs the plugin and reports for itself (``runtime_ext.plugin``).
The service's gauges show the replica, so the reports are merged key by key: counters, token and
byte totals and histogram counts are summed; rates are averaged; what describes one scheduler
or its model copy (pid, rank, page size, layer counts, settings, strings) is taken from the
first report. Per-scheduler identity stays visible in ``structserve_runtime_ext_loaded``.
"""

from __future__ import annotations

from typing import Any

from runtime_ext.report import SchedulerReport

# Numbers that describe a scheduler or its model copy, not a quantity the replica adds up.
FIRST = frozenset(
    {
        "pid",
        "dp_rank",
        "page_size",
        "reserve_ratio",
        "combine_blocks",
        "queue_time_buckets",
        "quantized",
        "kept",
        "group_size",
    }
)
MEAN = frozenset({"rate", "outlier_rate"})  # shares of each scheduler's own traffic


def merged(reports: list[SchedulerReport]) -> SchedulerReport | None:
    """The replica's record from the ranks' records (rank order), merged on their wire form."""
    if not reports:
        return None
    return SchedulerReport.from_wire(merge_reports([report.to_wire() for report in reports]))


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The replica's report; ``reports`` in rank order (the first is the representative)."""
    if not reports:
        return {}
    merged: dict[str, Any] = _merge(reports, key=None)
    return merged


def _merge(values: list[Any], key: str | None) -> Any:
    first = values[0]
    if key in FIRST:
        return first
    if isinstance(first, dict):
        dicts = [v for v in values if isinstance(v, dict)]
        keys = list(dict.fromkeys(k for d in dicts for k in d))
        return {k: _merge([d[k] for d in dicts if k in d], k) for k in keys}
    if _number(first) and all(_number(v) for v in values):
        total = sum(values)
        return total / len(values) if key in MEAN else total
    if isinstance(first, list) and all(isinstance(v, list) and len(v) == len(first) for v in values):
        if all(_number(x) for v in values for x in v):
            return [sum(column) for column in zip(*values)]
    return first


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

"""merge_reports: one replica report from the data-parallel schedulers' plugin reports."""

from __future__ import annotations

from runtime_ext.report_merge import merge_reports


def _report(pid: int, rank: int, hits: int, rate: float) -> dict:
    return {
        "version": "1",
        "pid": pid,
        "dp_rank": rank,
        "registered": True,
        "kv_cache": "c8_dynamic",
        "kv_pool": {"tokens": 1024, "page_size": 16, "bytes": 4096},
        "kv_cache_stats": {"outlier_rate": rate},
        "quant": {"quantized": 7, "kept": 2, "int8_calls": hits},
        "prefix_cache": {"backend": "combined", "combine_blocks": 4, "hit_tokens": hits},
        "admission": {"policy": "budget", "queue_time_buckets": [0.1, 1.0], "queue_time_counts": [hits, hits + 1]},
    }


def test_counters_sum_rates_average_identity_from_the_first() -> None:
    merged = merge_reports([_report(11, 0, 5, 0.1), _report(12, 1, 7, 0.3)])
    assert merged["prefix_cache"] == {"backend": "combined", "combine_blocks": 4, "hit_tokens": 12}
    assert merged["kv_pool"] == {"tokens": 2048, "page_size": 16, "bytes": 8192}
    assert abs(merged["kv_cache_stats"]["outlier_rate"] - 0.2) < 1e-12
    assert merged["quant"] == {"quantized": 7, "kept": 2, "int8_calls": 12}  # layers per model copy
    assert merged["admission"]["queue_time_buckets"] == [0.1, 1.0]
    assert merged["admission"]["queue_time_counts"] == [12, 14]
    assert (merged["pid"], merged["dp_rank"], merged["registered"], merged["kv_cache"]) == (11, 0, True, "c8_dynamic")


def test_one_report_is_itself_and_none_is_empty() -> None:
    one = _report(11, 0, 5, 0.1)
    assert merge_reports([one]) == one
    assert merge_reports([]) == {}


def test_keys_present_in_one_scheduler_only_are_kept() -> None:
    merged = merge_reports([{"a": 1}, {"a": 2, "error": "x"}])
    assert merged == {"a": 3, "error": "x"}

"""The scheduler's report as one typed record (``runtime_ext.report``): what crosses the process
boundary is ``to_wire``'s dict and comes back as the same record; a report without the record's
shape is refused by name; data-parallel ranks merge into one record."""

from __future__ import annotations

import json

import pytest

from runtime_ext.report import KVServing, ReportError, SchedulerReport
from runtime_ext.report_merge import merged

NPU_POOL = KVServing("NPUMHATokenToKVPool", "int8", "c8_dynamic", "AscendAttnBackend")


def _report(pid: int = 11, rank: int = 0, hits: int = 5, serving: KVServing | None = NPU_POOL) -> SchedulerReport:
    return SchedulerReport(
        version="1",
        pid=pid,
        registered=True,
        kv_cache="c8_dynamic",
        kv_rotation="kv",
        kv_kernels="native",
        kv_kernels_reason="compiled for this CPU",
        dp_rank=rank,
        serving=serving,
        sections={"quant": {"quantized": 7, "int8_calls": hits}, "kv_pool": {"tokens": 1024, "page_size": 16}},
    )


@pytest.mark.parametrize(
    "report", [_report(), _report(serving=None), SchedulerReport("1", 3, False, "bf16", "none", "reference", error="x")]
)
def test_the_record_crosses_the_process_boundary_unchanged(report):
    wire = json.loads(json.dumps(report.to_wire()))  # what SGLang's internal-state RPC carries
    assert SchedulerReport.from_wire(wire) == report


def test_the_wire_names_are_the_ones_metrics_reads():
    wire = _report().to_wire()
    assert (wire["kv_pool_class"], wire["kv_store_dtype"], wire["kv_quant_method"], wire["attention_backend"]) == (
        "NPUMHATokenToKVPool",
        "int8",
        "c8_dynamic",
        "AscendAttnBackend",
    )
    assert wire["quant"] == {"quantized": 7, "int8_calls": 5} and wire["kv_pool"]["tokens"] == 1024
    assert "kv_pool_class" not in _report(serving=None).to_wire()


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"pid": None}, "pid"),
        ({"pid": "11"}, "pid"),
        ({"registered": 1}, "registered"),
        ({"kv_store_dtype": None}, "kv_store_dtype"),
    ],
)
def test_a_report_without_the_records_shape_is_refused_by_name(change, key):
    wire = {k: v for k, v in {**_report().to_wire(), **change}.items() if v is not None}
    with pytest.raises(ReportError, match=repr(key)):
        SchedulerReport.from_wire(wire)


def test_sections_are_read_by_known_name():
    assert _report().section("quant")["int8_calls"] == 5 and _report().section("grammar") == {}
    with pytest.raises(KeyError, match="quantt"):
        _report().section("quantt")


def test_ranks_merge_into_one_record():
    one = merged([_report(11, 0, 5), _report(12, 1, 7)])
    assert one is not None and (one.pid, one.dp_rank, one.serving) == (11, 0, NPU_POOL)  # identity: the first
    assert one.section("quant") == {"quantized": 7, "int8_calls": 12}  # counters add, layer counts do not
    assert one.section("kv_pool") == {"tokens": 2048, "page_size": 16}
    assert merged([]) is None

"""What ran the C8 KV calls reaches ``/metrics``: ``kv_cpu`` counts each call by the implementation
that ran it, the plugin report (read in the scheduler) carries the counts and the reason for the
library's status, and the service's gauges show them (``structserve_kv_kernel_calls{impl}``,
``structserve_kv_kernels_reason{reason}``)."""

from __future__ import annotations

import torch
from prometheus_client import generate_latest

from runtime_ext.ops import kv_cpu
from runtime_ext.plugin import plugin_report
from runtime_ext.report_merge import merged
from service import metrics as m
from service.api.routes.metrics import _plugin_gauges


def _gauge(text: str, sample: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(sample + " "))
    return float(line.split()[-1])


def test_the_calls_each_implementation_ran_reach_the_metrics():
    assert kv_cpu.status() == "native", kv_cpu.reason()
    before = plugin_report().section("kv_kernel_calls")
    q, scales = torch.zeros(8, 2, 16, dtype=torch.int8), torch.ones(8, 2, dtype=torch.float16)
    for dtype in (torch.bfloat16, torch.float32, torch.float16):  # no float16 kernel: the reference
        kv_cpu.gather_dequantize_per_token(q, scales, torch.tensor([1, 2]), dtype)
    kv_cpu.gather_dequantize_per_token(q, scales, torch.tensor([1, 2, 3, 4])[::2], torch.float32)  # strided
    report = plugin_report()
    calls = report.section("kv_kernel_calls")
    assert (calls["native"] - before["native"], calls["reference"] - before["reference"]) == (2, 2)
    assert report.kv_kernels_reason == "compiled for this CPU"

    replica = merged([report, report])  # two dp ranks: the calls add up
    assert replica is not None
    _plugin_gauges(replica)
    text = generate_latest(m.REGISTRY).decode()
    assert _gauge(text, 'structserve_kv_kernel_calls{impl="native"}') == 2 * calls["native"]
    assert _gauge(text, 'structserve_kv_kernel_calls{impl="reference"}') == 2 * calls["reference"]
    assert _gauge(text, 'structserve_kv_kernels_reason{reason="compiled for this CPU"}') == 1

"""The strict NPU emulation can fail: calls that break a documented torch_npu contract raise
ContractViolation (naming op, argument, rule and page), recorded calls replay through it, and the
calls runtime_ext's NPU kernels make (as the C8 methods and linear methods make them) keep to it."""

from __future__ import annotations

import json

import pytest
import torch

from runtime_ext.ops import get_op, kv_npu, kv_ref, quant_npu, quant_ref
from tests.unit.runtime_ext import npu_emulation as npu
from tests.unit.runtime_ext import npu_recording
from tests.unit.runtime_ext.npu_contracts import ContractViolation

I8, BF16, F16, F32 = torch.int8, torch.bfloat16, torch.float16, torch.float32


def t(*shape, dtype=F32):
    return torch.zeros(shape, dtype=dtype) if not dtype.is_floating_point else torch.full(shape, 0.5, dtype=dtype)


BROKEN = {  # name: (op, args, kwargs, the argument the violation must name)
    "anti_quant float32 dst_dtype (the old residual store)": (
        "npu_anti_quant", (t(4, 192, dtype=I8), t(192)), {"dst_dtype": F32}, "dst_dtype"),
    "linear bfloat16 input (not a documented dtype)": ("npu_linear", (t(4, 64, dtype=BF16), t(64, 64)), {}, "input"),
    "linear 3-D input": ("npu_linear", (t(2, 4, 64), t(64, 64)), {}, "input"),
    "linear weight of another inner dim": ("npu_linear", (t(4, 64), t(64, 32)), {}, "weight"),
    "anti_quant float16 scale": ("npu_anti_quant", (t(4, 192, dtype=I8), t(192, dtype=F16)), {}, "scale"),
    "anti_quant scale not the last dim": ("npu_anti_quant", (t(4, 192, dtype=I8), t(64)), {}, "scale"),
    "dynamic_quant float32 x (the old float32 call)": ("npu_dynamic_quant", (t(4, 64),), {}, "x"),
    "dynamic_quant 1-D x": ("npu_dynamic_quant", (t(64, dtype=BF16),), {}, "x"),
    "quantize float16 scales with div_mode": (
        "npu_quantize", (t(4, 8), t(8, dtype=F16), None, torch.qint8, 1, True), {}, "scales"),
    "quantize on axis 0": ("npu_quantize", (t(4, 8), t(8), None, torch.qint8, 0, True), {}, "axis"),
    "quant_matmul float32 x1": (
        "npu_quant_matmul", (t(2, 8), t(8, 4, dtype=I8), t(4)), {"output_dtype": BF16}, "x1"),
    "quant_matmul float32 output": (
        "npu_quant_matmul", (t(2, 8, dtype=I8), t(8, 4, dtype=I8), t(4)), {"output_dtype": F32}, "output_dtype"),
    "quant_matmul pertoken_scale of the wrong length": (
        "npu_quant_matmul", (t(2, 8, dtype=I8), t(8, 4, dtype=I8), t(4)),
        {"pertoken_scale": t(3), "output_dtype": BF16}, "pertoken_scale"),
    "quant_matmul fp16 output, pertoken, bf16 scale (not in the dtype table)": (
        "npu_quant_matmul", (t(2, 8, dtype=I8), t(8, 4, dtype=I8), t(4, dtype=BF16)),
        {"pertoken_scale": t(2), "output_dtype": F16}, "scale/bias/pertoken_scale/offset"),
    "weight_quant_batchmatmul float32 x": (
        "npu_weight_quant_batchmatmul", (t(2, 8), t(8, 4, dtype=I8), t(4)), {}, "x"),
    "weight_quant_batchmatmul scale dtype differs from x": (
        "npu_weight_quant_batchmatmul", (t(2, 8, dtype=BF16), t(8, 4, dtype=I8), t(4)), {}, "antiquant_scale"),
    "weight_quant_batchmatmul per-group scale shape": (
        "npu_weight_quant_batchmatmul", (t(2, 64, dtype=BF16), t(64, 4, dtype=I8), t(1, 4, dtype=BF16)),
        {"antiquant_group_size": 32}, "antiquant_scale"),
    "weight_quant_batchmatmul group size not a multiple of 32": (
        "npu_weight_quant_batchmatmul", (t(2, 64, dtype=BF16), t(64, 4, dtype=I8), t(4, 4, dtype=BF16)),
        {"antiquant_group_size": 16}, "antiquant_group_size"),
    "weight_quant_batchmatmul offset dtype differs from the scale": (
        "npu_weight_quant_batchmatmul",
        (t(2, 64, dtype=BF16), t(64, 4, dtype=I8), t(2, 4, dtype=BF16), t(2, 4)),
        {"antiquant_group_size": 32}, "antiquant_offset"),
    "int4pack values out of range": (
        "npu_convert_weight_to_int4pack", (torch.full((2, 8), 9, dtype=torch.int32),), {}, "weight"),
    "int4pack int8 weight": ("npu_convert_weight_to_int4pack", (t(2, 8, dtype=I8),), {}, "weight"),
    "int4pack last dim not a multiple of 8": (
        "npu_convert_weight_to_int4pack", (t(2, 6, dtype=torch.int32),), {}, "weight"),
    "format_cast a non-int format": ("npu_format_cast", (t(2, 2), "NZ"), {}, "acl_format"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_call_that_breaks_the_documented_contract_raises(case):
    op, args, kwargs, arg = BROKEN[case]
    with pytest.raises(ContractViolation) as info:
        getattr(npu, op)(*args, **kwargs)
    assert info.value.op == op and info.value.arg == arg
    page = str(info.value)
    assert ("hiascend.com" in page or "github.com/Ascend/op-plugin/" in page) and "documented" in page


def test_recorded_calls_replay_and_a_broken_record_is_caught(tmp_path):
    recorder = npu_recording.Recorder(tmp_path / "calls.jsonl")
    xq, scale = recorder.npu_dynamic_quant(torch.randn(3, 2, 64, dtype=BF16))
    recorder.npu_anti_quant(xq.reshape(3, -1), torch.rand(128), dst_dtype=BF16)
    records = npu_recording.load(tmp_path / "calls.jsonl")
    assert [(r["op"], r["caller"]) for r in records] == [
        ("npu_dynamic_quant", "test_npu_contracts.test_recorded_calls_replay_and_a_broken_record_is_caught"),
        ("npu_anti_quant", "test_npu_contracts.test_recorded_calls_replay_and_a_broken_record_is_caught"),
    ]
    assert records[1]["kwargs"]["dst_dtype"] == {"dtype": "torch.bfloat16"}
    for r in records:
        npu_recording.replay(r)
    broken = json.loads(json.dumps(records[1]))
    broken["kwargs"]["dst_dtype"] = {"dtype": "torch.float32"}  # what the old residual store asked for
    with pytest.raises(ContractViolation, match="dst_dtype"):
        npu_recording.replay(broken)


@pytest.fixture
def strict_npu(monkeypatch):
    monkeypatch.setattr(kv_npu, "_npu", lambda: npu)
    monkeypatch.setattr(quant_npu, "_npu", lambda: npu)


@pytest.mark.parametrize("dtype", [BF16, F16, F32])
def test_the_npu_kernels_keep_to_the_contracts_for_every_model_dtype(strict_npu, dtype):
    """As the methods call them, for bf16, fp16 and float32 models (float32: cast at the op boundary)."""
    x = torch.randn(5, 3, 64).to(dtype)
    q, s = get_op("kv_quantize_per_token", "npu")(x, torch.float16)
    assert q.dtype == I8 and s.dtype == torch.float16
    scale = x.float().abs().amax(dim=0) / 127
    q8 = get_op("kv_quantize_static", "npu")(x, scale)
    assert get_op("kv_dequantize_static", "npu")(q8, scale, dtype).dtype == dtype
    assert get_op("kv_rotate", "npu")(x, kv_ref.hadamard(64)).dtype == dtype  # npu_linear in float32
    a = torch.randn(4, 128).to(dtype)
    w = torch.randn(48, 128) * 0.05
    y = get_op("w8a8_matmul", "npu")(a, *get_op("w8a8_prepare", "npu")(*quant_ref.quantize_weight_per_channel(w)))
    assert y.dtype == dtype and y.shape == (4, 48)
    for bits in (8, 4):
        prepared = get_op("weight_only_prepare", "npu")(*quant_ref.quantize_weight_groupwise(w, bits, 32), bits, 32)
        y = get_op("weight_only_matmul", "npu")(a, prepared, torch.zeros(48, dtype=dtype))
        assert y.dtype == dtype and y.shape == (4, 48)

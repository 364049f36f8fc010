"""Kernel dispatch: one table per op, a torch reference implementation (always present,
tested here) and an NPU implementation on ``torch_npu`` ops (tested against an emulation
of their documented semantics; not verified on hardware). The C8 KV read's ``cpu`` entries are
``kv_cpu``: one compiled pass, equal to the reference (which it falls back to without a compiler).

``get_op(name, device)`` picks by the tensor's device type; devices without an entry use
the reference. Imports torch lazily through the implementation modules.
"""

from __future__ import annotations

from typing import Any, Callable

from runtime_ext.ops import kv_cpu, kv_npu, kv_ref, quant_npu, quant_ref

OPS: dict[str, dict[str, Callable[..., Any]]] = {
    "kv_quantize_per_token": {"cpu": kv_ref.quantize_per_token, "npu": kv_npu.quantize_per_token},
    "kv_dequantize_per_token": {"cpu": kv_ref.dequantize_per_token, "npu": kv_ref.dequantize_per_token},
    "kv_quantize_static": {"cpu": kv_ref.quantize_static, "npu": kv_npu.quantize_static},
    "kv_dequantize_static": {"cpu": kv_ref.dequantize_static, "npu": kv_npu.dequantize_static},
    "kv_gather_dequantize_per_token": {
        "cpu": kv_cpu.gather_dequantize_per_token,
        "npu": kv_ref.gather_dequantize_per_token,
    },
    "kv_gather_dequantize_static": {"cpu": kv_cpu.gather_dequantize_static, "npu": kv_npu.gather_dequantize_static},
    "kv_residual_add": {"cpu": kv_cpu.residual_add, "npu": kv_ref.residual_add},
    "kv_store_per_token": {"cpu": kv_cpu.store_per_token, "npu": kv_npu.store_per_token},
    "kv_store_static": {"cpu": kv_cpu.store_static, "npu": kv_npu.store_static},
    "kv_residual_release": {"cpu": kv_cpu.residual_release, "npu": kv_ref.residual_release},
    "kv_residual_store": {"cpu": kv_cpu.residual_store, "npu": kv_ref.residual_store},
    "kv_rotate": {"cpu": kv_ref.rotate, "npu": kv_npu.rotate},
    "w8a8_prepare": {"cpu": quant_ref.prepare_w8a8, "npu": quant_npu.prepare_w8a8},
    "w8a8_matmul": {"cpu": quant_ref.w8a8_matmul, "npu": quant_npu.w8a8_matmul},
    "weight_only_prepare": {"cpu": quant_ref.prepare_weight_only, "npu": quant_npu.prepare_weight_only},
    "weight_only_matmul": {"cpu": quant_ref.weight_only_matmul, "npu": quant_npu.weight_only_matmul},
}


def get_op(name: str, device: str = "cpu") -> Callable[..., Any]:
    """The implementation of ``name`` for ``device`` ("cpu", "npu", "cuda", ...)."""
    try:
        table = OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known: {', '.join(sorted(OPS))}") from None
    return table.get(device, table["cpu"])

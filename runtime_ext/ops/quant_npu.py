"""NPU implementations of the linear-layer quantization ops on ``torch_npu`` (Ascend).

Verification level: contract-tested against documented op semantics, unverified on hardware.
No NPU exists where this was written. Each function is tested against a strict emulation of the
torch_npu ops it calls (``tests/unit/runtime_ext/npu_emulation.py``), which enforces each op's
documented contract (``npu_contracts.py``; table in ``docs/npu-contracts.md``); the real engine's
calls are recorded and replayed through it (``tests/engine/test_npu_recorded_calls.py``).

- ``npu_dynamic_quant(x)``: per-token symmetric INT8 (int8 y, float32 scale[M]); x float16/bfloat16.
- ``npu_quant_matmul(x1, x2, scale, pertoken_scale=..., bias=..., output_dtype=...)``:
  ``(x1 @ x2) * scale[N] * pertoken_scale[M] (+ bias)`` with int8 x1 ``[M, K]``, x2 ``[K, N]``,
  float32 scale and pertoken_scale; output_dtype float16/bfloat16 (the documented dtype table allows
  a float32 or output-dtype bias with pertoken_scale: we pass the output dtype).
- ``npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, bias=None,
  antiquant_group_size=G)``: ``x @ ((weight + offset) * scale)`` with x float16/bfloat16 ``[M, K]``,
  weight ``[K, N]`` (int8, or int32 holding 8 packed int4 per element from
  ``npu_convert_weight_to_int4pack``), scale in x's dtype, ``[ceil(K/G), N]`` per group (SmolLM2:
  K = 576, G = 128 -> 5 groups, the last one short); the offset (asymmetric weights only) with the
  scale's dtype and shape.
- ``npu_format_cast(w, 29)``: the W8A8 weight in FRACTAL_NZ layout (same values) at load.

Float32 models: these ops take float16/bfloat16 activations only, so a float32 ``x`` is cast to
bfloat16 at the op boundary and the result cast back to float32 (bfloat16 precision in the matmul).

The op module is looked up at call time (``_npu()``), so tests substitute the emulation.
"""

from __future__ import annotations

from typing import Any

import torch

from runtime_ext.ops.kv_npu import op_dtype

FRACTAL_NZ = 29


def _npu() -> Any:
    import torch_npu  # noqa: F401  (Ascend only)

    return torch_npu


def prepare_w8a8(wq: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """At load: int8 ``[N, K]`` -> ``[K, N]`` in FRACTAL_NZ; scales stay ``[N]`` float32."""
    return _npu().npu_format_cast(wq.t().contiguous(), FRACTAL_NZ), w_scale.float()


def w8a8_matmul(
    x: torch.Tensor, wq_t: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    npu, dtype = _npu(), op_dtype(x.dtype)
    xq, x_scale = npu.npu_dynamic_quant(x.to(dtype))
    bias = None if bias is None else bias.to(dtype)
    y = npu.npu_quant_matmul(xq, wq_t, w_scale, pertoken_scale=x_scale, bias=bias, output_dtype=dtype)
    return y.to(x.dtype)


def prepare_weight_only(
    q: torch.Tensor, scale: torch.Tensor, bits: int, group: int, offset: torch.Tensor | None = None
) -> dict:
    """At load: our ``[N, K]`` (8 bit) / packed ``[N, K/2]`` (4 bit), ``scale[N, K/G]`` and the
    optional ``offset[N, K/G]`` -> the op's ``weight[K, N]`` (int4 repacked by
    ``npu_convert_weight_to_int4pack``), ``scale[K/G, N]`` and ``offset[K/G, N]`` (float32 here; cast
    once per activation dtype on first use, as the op wants x's dtype for both)."""
    from runtime_ext.ops.kv_ref import unpack_int4
    from runtime_ext.ops.quant_ref import compact_offset

    npu = _npu()
    values = (unpack_int4(q) if bits == 4 else q).t().contiguous()
    weight = npu.npu_convert_weight_to_int4pack(values.to(torch.int32)) if bits == 4 else values
    offset = compact_offset(offset)
    prepared = {"weight": weight, "scale_t": scale.t().contiguous(), "group": group}
    if offset is not None:
        prepared["offset_t"] = offset.float().t().contiguous()
    return prepared


def _in_dtype(prepared: dict, name: str, dtype: torch.dtype) -> torch.Tensor | None:
    """``prepared[name]`` cast to ``dtype``, cached beside it (None when absent)."""
    if name not in prepared:
        return None
    key = f"{name}_{str(dtype).removeprefix('torch.')}"
    if key not in prepared:
        prepared[key] = prepared[name].to(dtype)
    return prepared[key]


def weight_only_matmul(x: torch.Tensor, prepared: dict, bias: torch.Tensor | None = None) -> torch.Tensor:
    dtype = op_dtype(x.dtype)
    y = _npu().npu_weight_quant_batchmatmul(
        x.to(dtype),
        prepared["weight"],
        _in_dtype(prepared, "scale_t", dtype),
        antiquant_offset=_in_dtype(prepared, "offset_t", dtype),
        bias=None if bias is None else bias.to(dtype),
        antiquant_group_size=prepared["group"],
    )
    return y.to(x.dtype)

"""NPU implementations of the linear-layer quantization ops on ``torch_npu`` (Ascend).

UNVERIFIED ON HARDWARE: no NPU exists where this was written. Each function is tested
against an emulation of the documented semantics of the ``torch_npu`` ops it calls
(``tests/unit/runtime_ext/npu_emulation.py``):

- ``npu_dynamic_quant(x)``: per-token symmetric INT8 (int8 y, float32 scale[M]).
- ``npu_quant_matmul(x1, x2, scale, pertoken_scale=..., bias=..., output_dtype=...)``:
  ``(x1 @ x2) * scale[N] * pertoken_scale[M] (+ bias)`` with int8 x1 ``[M, K]``, x2 ``[K, N]``.
- ``npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
  bias=None, antiquant_group_size=G)``: ``x @ ((weight + offset) * scale)`` with weight
  ``[K, N]`` (int8, or int32 holding 8 packed int4 per element from
  ``npu_convert_weight_to_int4pack``), scale ``[K/G, N]`` (per group) or ``[N]``.
- ``npu_format_cast(w, 29)``: the weight in FRACTAL_NZ layout (same values) at load.

The op module is looked up at call time (``_npu()``), so tests substitute the emulation.
"""

from __future__ import annotations

from typing import Any

import torch

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
    npu = _npu()
    xq, x_scale = npu.npu_dynamic_quant(x)
    return npu.npu_quant_matmul(xq, wq_t, w_scale, pertoken_scale=x_scale, bias=bias, output_dtype=x.dtype)


def prepare_weight_only(q: torch.Tensor, scale: torch.Tensor, bits: int, group: int) -> dict:
    """At load: our ``[N, K]`` (8 bit) / packed ``[N, K/2]`` (4 bit) and ``scale[N, K/G]`` ->
    the op's ``weight[K, N]`` (int4 repacked by ``npu_convert_weight_to_int4pack``) and ``scale[K/G, N]``."""
    from runtime_ext.ops.kv_ref import unpack_int4

    npu = _npu()
    values = (unpack_int4(q) if bits == 4 else q).t().contiguous()
    weight = npu.npu_convert_weight_to_int4pack(values.to(torch.int32)) if bits == 4 else values
    return {"weight": weight, "scale_t": scale.t().contiguous(), "group": group}


def weight_only_matmul(x: torch.Tensor, prepared: dict, bias: torch.Tensor | None = None) -> torch.Tensor:
    return _npu().npu_weight_quant_batchmatmul(
        x, prepared["weight"], prepared["scale_t"].to(x.dtype), bias=bias, antiquant_group_size=prepared["group"]
    )

"""The C8 KV methods as SGLang ``KVCacheQuantMethodBase`` subclasses (imports sglang).

- ``c8_dynamic``: int8 K/V ``[size, H, D]`` plus float16 scales ``[size, H]`` per layer,
  computed when a token is stored (absmax/127 per token and head; on NPU by ``npu_dynamic_quant``,
  whose float32 scale is stored rounded to float16: see ``ops/kv_npu.py``).
- ``c8_static``: int8 K/V with read-only per-channel scales ``[H, D]`` per layer from the
  calibration file (``RuntimeExtConfig.kv_calibration``); values clamped.
- ``c8_static_residual``: ``c8_static`` plus INT4 residuals for outlier vectors (ε > τ) in
  a side buffer per layer and K-or-V (``residual.ResidualSlots``); slots are released when
  the allocator frees their pages, and when a location is written again. The residual is
  ``x - deq8`` with ``deq8`` dequantized in the model dtype (what attention reads), so no
  dequantization ever asks for float32 (``npu_anti_quant`` outputs float16/bfloat16 only).

Besides SGLang's whole-buffer read (``dequantize_kv_tensor``, the PLAIN access), each method
has ``gather(buffer, scales, locs)``: dequantize only the rows at ``locs``, which is what
runtime_ext's attention backend reads. All math goes through the ops dispatch table.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import torch
from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import KVCacheQuantMethodBase

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.kv_cache import sizing
from runtime_ext.kv_cache.residual import ResidualSlots
from runtime_ext.ops import get_op


class C8DynamicKVCacheMethod(KVCacheQuantMethodBase):
    name = "c8_dynamic"
    SCALE_BLOCK_SIZE = 1
    QUANTIZE, DEQUANTIZE = "kv_quantize_per_token", "kv_dequantize_per_token"

    def __init__(self, dtype: Any = torch.bfloat16) -> None:
        self.dtype = dtype

    def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
        def values():
            return [torch.zeros((size, head_num, head_dim), dtype=torch.int8, device=device) for _ in range(layer_num)]

        def scales():
            return [torch.zeros((size, head_num), dtype=torch.float16, device=device) for _ in range(layer_num)]

        return {
            "k_buffer": values(),
            "v_buffer": values(),
            "k_scale_buffer": scales(),
            "v_scale_buffer": scales(),
            "dq_k_buffer": None,
            "dq_v_buffer": None,
            "store_dtype": torch.int8,
        }

    def quantize_and_store(
        self,
        k_buffer,
        v_buffer,
        k_scale_buffer,
        v_scale_buffer,
        loc,
        cache_k,
        cache_v,
        k_scale=None,
        v_scale=None,
        native_k_scale_buffer=None,
        native_v_scale_buffer=None,
    ) -> None:
        quantize = get_op(self.QUANTIZE, k_buffer.device.type)
        for buf, scale_buf, x in ((k_buffer, k_scale_buffer, cache_k), (v_buffer, v_scale_buffer, cache_v)):
            q, s = quantize(x.reshape(-1, *buf.shape[1:]), torch.float16)
            buf[loc] = q
            scale_buf[loc] = s

    def dequantize_kv_tensor(self, tensor, scales, layer_id, dtype=None):
        return get_op(self.DEQUANTIZE, tensor.device.type)(tensor, scales, dtype or self.dtype)

    def gather(self, buffer, scales, locs):
        return get_op(self.DEQUANTIZE, buffer.device.type)(buffer[locs], scales[locs], self.dtype)

    def dequantize_prev_kv(self, k_q, k_scales, v_q, v_scales, layer_id):
        return (self.dequantize_kv_tensor(k_q, k_scales, layer_id), self.dequantize_kv_tensor(v_q, v_scales, layer_id))

    def compute_cell_size(self, head_num, head_dim, num_layers, kv_size) -> int:
        return sizing.cell_bytes(self.name, num_layers, head_num, head_dim)

    def release(self, locs) -> None:
        """Pages at ``locs`` were freed (nothing to do without side buffers)."""

    def stats(self) -> dict:
        return {}


class C8StaticKVCacheMethod(C8DynamicKVCacheMethod):
    """The pool's per-layer "scale buffers" are the static ``[H, D]`` tensors (no per-token scales)."""

    name = "c8_static"
    QUANTIZE, DEQUANTIZE = "kv_quantize_static", "kv_dequantize_static"

    @cached_property
    def calibration_path(self) -> Any:
        return RuntimeExtConfig.from_env().require_kv_calibration()

    @cached_property
    def calibration(self) -> Any:
        from runtime_ext.kv_cache.calibration import load_raw_calibration

        return load_raw_calibration(self.calibration_path)

    def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
        from runtime_ext.kv_cache.calibration import check_shape

        calib = check_shape(self.calibration, self.calibration_path, layer_num, head_num, head_dim)
        bufs = super().create_buffers(size, head_num, head_dim, layer_num, device)

        def scales(rows):
            return [torch.tensor(r, dtype=torch.float32, device=device) for r in rows]

        bufs["k_scale_buffer"], bufs["v_scale_buffer"] = scales(calib.k_scale), scales(calib.v_scale)
        return bufs

    def quantize_and_store(
        self,
        k_buffer,
        v_buffer,
        k_scale_buffer,
        v_scale_buffer,
        loc,
        cache_k,
        cache_v,
        k_scale=None,
        v_scale=None,
        native_k_scale_buffer=None,
        native_v_scale_buffer=None,
    ) -> None:
        quantize = get_op(self.QUANTIZE, k_buffer.device.type)
        for buf, scale, x in ((k_buffer, k_scale_buffer, cache_k), (v_buffer, v_scale_buffer, cache_v)):
            buf[loc] = quantize(x.reshape(-1, *buf.shape[1:]), scale)

    def gather(self, buffer, scales, locs):
        return get_op(self.DEQUANTIZE, buffer.device.type)(buffer[locs], scales, self.dtype)


class C8StaticResidualKVCacheMethod(C8StaticKVCacheMethod):
    name = "c8_static_residual"

    def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
        bufs = super().create_buffers(size, head_num, head_dim, layer_num, device)
        capacity = sizing.residual_slots(size, head_num, self.calibration.outlier_rate)
        self.sides = {}  # data_ptr of a value buffer -> its residual slots
        for buf in bufs["k_buffer"] + bufs["v_buffer"]:
            self.sides[buf.data_ptr()] = ResidualSlots(capacity, head_num, head_dim, self.calibration.tau, device)
        return bufs

    def quantize_and_store(
        self,
        k_buffer,
        v_buffer,
        k_scale_buffer,
        v_scale_buffer,
        loc,
        cache_k,
        cache_v,
        k_scale=None,
        v_scale=None,
        native_k_scale_buffer=None,
        native_v_scale_buffer=None,
    ) -> None:
        super().quantize_and_store(k_buffer, v_buffer, k_scale_buffer, v_scale_buffer, loc, cache_k, cache_v)
        locs = torch.as_tensor(loc, device=k_buffer.device).reshape(-1)
        for buf, scale, x in ((k_buffer, k_scale_buffer, cache_k), (v_buffer, v_scale_buffer, cache_v)):
            x = x.reshape(-1, *buf.shape[1:])
            # what attention will read (model dtype): the residual corrects exactly that
            deq8 = get_op(self.DEQUANTIZE, buf.device.type)(buf[locs], scale, self.dtype)
            self.sides[buf.data_ptr()].store(locs, x, deq8)

    def dequantize_kv_tensor(self, tensor, scales, layer_id, dtype=None):
        out = super().dequantize_kv_tensor(tensor, scales, layer_id, dtype)
        locs = torch.arange(tensor.shape[0], device=tensor.device)
        return self.sides[tensor.data_ptr()].apply(locs, out)

    def gather(self, buffer, scales, locs):
        return self.sides[buffer.data_ptr()].apply(locs, super().gather(buffer, scales, locs))

    def compute_cell_size(self, head_num, head_dim, num_layers, kv_size) -> int:
        return sizing.cell_bytes(self.name, num_layers, head_num, head_dim, self.calibration.outlier_rate)

    def release(self, locs) -> None:
        for side in self.sides.values():
            side.release(locs)

    def slots_on(self, locs) -> int:
        """Slots held by any of ``locs`` (a census: on free pages this must be 0)."""
        return sum(int(torch.isin(s.keys // s.heads, locs).sum()) for s in self.sides.values())

    def side_bytes(self) -> int:
        return sum(side.nbytes() for side in self.sides.values())

    def stats(self) -> dict:
        sides = list(self.sides.values())
        seen, outliers = sum(s.seen for s in sides), sum(s.outliers for s in sides)
        return {
            "vectors_stored": seen,
            "outliers": outliers,
            "outlier_rate": outliers / seen if seen else 0.0,
            "dropped": sum(s.dropped for s in sides),
            "slots_used": sum(s.used for s in sides),
            "slots": sum(s.capacity for s in sides),
            "side_bytes": self.side_bytes(),
        }


METHODS = (C8DynamicKVCacheMethod, C8StaticKVCacheMethod, C8StaticResidualKVCacheMethod)

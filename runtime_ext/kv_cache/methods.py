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

Each method stores K (and V, with ``kv_rotation: kv``) Hadamard-rotated when ``kv_rotation`` says so
(``rotation.py``): quantization, scales and residuals all live in the rotated space.

Besides SGLang's whole-buffer read (``dequantize_kv_tensor``, the PLAIN access), each method
has ``gather(buffer, scales, locs)``: dequantize only the rows at ``locs``, which is what
runtime_ext's attention backend reads. All math goes through the ops dispatch table.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import torch
from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import KVCacheQuantMethodBase

from runtime_ext.config import KVRotation, RuntimeExtConfig, resolve_rotation
from runtime_ext.kv_cache import sizing
from runtime_ext.kv_cache.poison import PoisonedRows
from runtime_ext.kv_cache.residual import ResidualSlots
from runtime_ext.kv_cache.rotation import Rotation
from runtime_ext.ops import get_op, kv_cpu


class C8DynamicKVCacheMethod(KVCacheQuantMethodBase):
    name = "c8_dynamic"
    SCALE_BLOCK_SIZE = 1
    DEQUANTIZE = "kv_dequantize_per_token"  # a whole buffer (SGLang's PLAIN access)
    GATHER = "kv_gather_dequantize_per_token"  # rows at locs, dequantized (one pass on the CPU: ops.kv_cpu)
    STORE = "kv_store_per_token"  # quantize into rows at loc (one call on the CPU)

    def __init__(self, dtype: Any = torch.bfloat16, rotation: KVRotation | None = None) -> None:
        self.dtype = dtype
        self.rotation = Rotation(resolve_rotation(rotation or RuntimeExtConfig.from_env().kv_rotation, self.name))
        self._keys: set[int] = set()  # data_ptr of each layer's K buffer

    def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
        if self.rotation:
            self.rotation.matrix(head_dim, device)  # a head dim without a Hadamard matrix fails here

        def values():
            return [torch.zeros((size, head_num, head_dim), dtype=torch.int8, device=device) for _ in range(layer_num)]

        def scales():
            return [torch.zeros((size, head_num), dtype=torch.float16, device=device) for _ in range(layer_num)]

        keys = values()
        self._keys, self.device = {buf.data_ptr() for buf in keys}, torch.device(device)
        self.poison = PoisonedRows(size, device)
        return {
            "k_buffer": keys,
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
        for is_key, buf, scale, x in (
            (True, k_buffer, k_scale_buffer, cache_k),
            (False, v_buffer, v_scale_buffer, cache_v),
        ):
            x = x.reshape(-1, *buf.shape[1:])
            if self.rotation.side(is_key):
                x = self.rotation.rotate(x, torch.float32, self.kind)  # (the NPU path keeps fp16/bf16: kv_npu.rotate)
            self._store(buf, scale, loc, x)

    @property
    def kind(self) -> str:
        """The device type the pool's buffers were created for: it picks the ops table. (On a device it
        is each buffer's own; the torch_npu twin's "npu" buffers live on the CPU: tests/npu_twin.)"""
        return getattr(self, "device", torch.device("cpu")).type

    def _store(self, buf, scale_buf, loc, x):
        """Quantize ``x`` (already in the stored space) into the rows ``loc``; tokens that cannot be
        stored are written as zeros and their locations marked (``poison.py``). Returns that mask."""
        bad = get_op(self.STORE, self.kind)(buf, scale_buf, loc, x)
        self.poison.mark(loc, bad)
        return bad

    def _rows(self, buffer, scales, locs, dtype):
        """Rows ``locs`` (None: all) dequantized, in the stored (possibly rotated) space."""
        if locs is None:
            return get_op(self.DEQUANTIZE, self.kind)(buffer, scales, dtype)
        return get_op(self.GATHER, self.kind)(buffer, scales, locs, dtype)

    def _back(self, rows, is_key: bool):
        return self.rotation.rotate(rows, None, self.kind) if self.rotation.side(is_key) else rows

    def dequantize_kv_tensor(self, tensor, scales, layer_id, dtype=None):
        """A whole layer's K or V in the model's space (SGLang's PLAIN access): rotated back."""
        return self._back(self._rows(tensor, scales, None, dtype or self.dtype), tensor.data_ptr() in self._keys)

    def gather(self, buffer, scales, locs):
        """Rows ``locs`` as stored: rotated when ``self.rotation`` rotates that side (the reader
        rotates the query, and the output for V; see ``rotation.py``)."""
        return self._rows(buffer, scales, locs, self.dtype)

    def dequantize_prev_kv(self, k_q, k_scales, v_q, v_scales, layer_id):
        k = self._rows(k_q, k_scales, None, self.dtype)
        return self._back(k, True), self._back(self._rows(v_q, v_scales, None, self.dtype), False)

    def compute_cell_size(self, head_num, head_dim, num_layers, kv_size) -> int:
        return sizing.cell_bytes(self.name, num_layers, head_num, head_dim)

    def kernels(self) -> str:
        """What reads this pool's rows: ``native`` (``ops.kv_cpu``), ``reference`` or the device's ops."""
        device = getattr(self, "device", torch.device("cpu")).type
        return kv_cpu.status() if device == "cpu" else device

    def release(self, locs) -> None:
        """Pages at ``locs`` were freed: their poison marks go with them."""
        self.poison.clear(locs)

    def stats(self) -> dict:
        return {"requests_failed_non_finite": self.poison.requests_failed, "tokens_refused": self.poison.tokens_refused}


class C8StaticKVCacheMethod(C8DynamicKVCacheMethod):
    """The pool's per-layer "scale buffers" are the static ``[H, D]`` tensors (no per-token scales)."""

    name = "c8_static"
    DEQUANTIZE = "kv_dequantize_static"
    GATHER, STORE = "kv_gather_dequantize_static", "kv_store_static"

    @cached_property
    def calibration_path(self) -> Any:
        return RuntimeExtConfig.from_env().require_kv_calibration()

    @cached_property
    def calibration(self) -> Any:
        from runtime_ext.kv_cache.calibration import load_raw_calibration

        return load_raw_calibration(self.calibration_path)

    def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
        from runtime_ext.kv_cache.calibration import check_rotation, check_shape

        calib = check_shape(self.calibration, self.calibration_path, layer_num, head_num, head_dim)
        check_rotation(calib, self.calibration_path, self.rotation.which)
        bufs = super().create_buffers(size, head_num, head_dim, layer_num, device)

        def scales(rows):
            return [torch.tensor(r, dtype=torch.float32, device=device) for r in rows]

        bufs["k_scale_buffer"], bufs["v_scale_buffer"] = scales(calib.k_scale), scales(calib.v_scale)
        return bufs


class C8StaticResidualKVCacheMethod(C8StaticKVCacheMethod):
    name = "c8_static_residual"

    def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
        bufs = super().create_buffers(size, head_num, head_dim, layer_num, device)
        capacity = sizing.residual_slots(size, head_num, self.calibration.outlier_rate)
        self.sides = {}  # data_ptr of a value buffer -> its residual slots
        for buf in bufs["k_buffer"] + bufs["v_buffer"]:
            self.sides[buf.data_ptr()] = ResidualSlots(capacity, head_num, head_dim, self.calibration.tau, device)
        return bufs

    def _store(self, buf, scale, loc, x):
        bad = super()._store(buf, scale, loc, x)
        if bad is not None:  # the residual of a zeroed token is zero too
            from runtime_ext.ops.kv_ref import zero_rows

            x = zero_rows(x, bad)
        locs = torch.as_tensor(loc, device=buf.device).reshape(-1)
        # what attention will read (model dtype): the residual corrects exactly that
        deq8 = get_op(self.GATHER, self.kind)(buf, scale, locs, self.dtype)
        self.sides[buf.data_ptr()].store(locs, x, deq8)
        return bad

    def _rows(self, buffer, scales, locs, dtype):
        out = super()._rows(buffer, scales, locs, dtype)
        if locs is None:
            locs = torch.arange(buffer.shape[0], device=buffer.device)
        return self.sides[buffer.data_ptr()].apply(locs, out)

    def compute_cell_size(self, head_num, head_dim, num_layers, kv_size) -> int:
        return sizing.cell_bytes(self.name, num_layers, head_num, head_dim, self.calibration.outlier_rate)

    def release(self, locs) -> None:
        super().release(locs)
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
        return super().stats() | {
            "vectors_stored": seen,
            "outliers": outliers,
            "outlier_rate": outliers / seen if seen else 0.0,
            "dropped": sum(s.dropped for s in sides),
            "slots_used": sum(s.used for s in sides),
            "slots": sum(s.capacity for s in sides),
            "side_bytes": self.side_bytes(),
        }


METHODS = (C8DynamicKVCacheMethod, C8StaticKVCacheMethod, C8StaticResidualKVCacheMethod)

"""The C8 KV pool on ``engine.device: npu``: SGLang's own ``NPUMHATokenToKVPool`` holding runtime_ext's
method (imports sglang and torch).

SGLang 0.5.23 builds the NPU pool through ``KVCacheConfigurator._build_ascend_mha_kv_pool``, which
passes no quant method, and ``NPUMHATokenToKVPool`` overrides both the buffer allocation and the
store with its own (``_npu_reshape_and_cache`` of ``cache_k.to(dtype)``: K/V truncated to int8).
``build_c8_pool`` (an AROUND hook on that builder, ``sglang_hooks``) builds ``C8NPUMHATokenToKVPool``
instead, with the same arguments plus the method the configurator's own ``_build_mha_quant_method``
answers (runtime_ext's, through its hook):

- **buffers**: the method's (``create_buffers``: int8 ``[size + page, H, D]`` per layer and side,
  plus its scales and side buffers), through ``MHATokenToKVPool``'s quantized allocation;
- **store**: ``set_kv_buffer`` quantizes through the method (``quantize_and_store``: on the NPU
  ``npu_dynamic_quant`` / ``npu_quantize``, scales kept; ``ops/kv_npu.py``);
- **read**: ``get_key_buffer`` / ``get_value_buffer`` (what the ``ascend`` backend hands its
  kernels) return the layer **dequantized** in the model dtype (``dequantize_kv_tensor``: C8-S
  through ``npu_anti_quant``, C8-D scale broadcast, residuals added, rotation undone), shaped
  ``[num_blocks, block_size, H, D]`` as the NPU pool's own buffers are. The int8 buffers never
  reach an attention kernel raw. Cost: the whole layer is dequantized per call (one pass over
  the pool per layer and step), the price of reusing SGLang's unquantized kernels unchanged.

Not wired (refused when asked): HiCache's NPU transfer (``get_hicache_transfer_buffers``) and the
disaggregation buffer export read the int8 buffers without their scales.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool


class C8NPUMHATokenToKVPool(NPUMHATokenToKVPool):
    """``NPUMHATokenToKVPool`` whose buffers, store and read are runtime_ext's C8 method's."""

    def _create_buffers(self) -> None:
        if not self.is_quantized_kv_cache:
            raise ValueError(f"{type(self).__name__} needs runtime_ext's KV quant method")
        MHATokenToKVPool._create_buffers(self)  # the method's buffers (the quantized allocation)

    def _init_kv_copy_and_warmup(self) -> None:
        self._kv_copy_config = None  # as the NPU pool: no CUDA copy kernels

    def set_kv_buffer(self, layer: Any, loc_info: Any, cache_k: torch.Tensor, cache_v: torch.Tensor,
                      k_scale: Any = None, v_scale: Any = None, layer_id_override: int | None = None,
                      dcp_kv_mask: Any = None) -> None:  # fmt: skip
        layer_id = layer.layer_id if layer_id_override is None else layer_id_override
        self._set_quantized_kv_buffer(layer_id, layer_id, loc_info, cache_k, cache_v)

    def _read(self, buffers: list, scales: list, layer_id: int) -> torch.Tensor:
        local = layer_id - self.start_layer
        rows = self.quant_method.dequantize_kv_tensor(buffers[local], scales[local], layer_id)
        return rows.view(-1, self.page_size, *rows.shape[1:])

    def _get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self._read(self.k_buffer, self.k_scale_buffer, layer_id)

    def _get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self._read(self.v_buffer, self.v_scale_buffer, layer_id)

    def get_hicache_transfer_buffers(self) -> Any:
        raise NotImplementedError("HiCache on device npu with a C8 KV cache is not wired: use kv_cache: bf16")

    def get_contiguous_buf_infos(self) -> Any:
        raise NotImplementedError("PD disaggregation on device npu with a C8 KV cache is not wired: use kv_cache: bf16")


def build_c8_pool(configurator: Any, *, max_total_num_tokens: int) -> C8NPUMHATokenToKVPool:
    """What ``_build_ascend_mha_kv_pool`` builds, as ``C8NPUMHATokenToKVPool`` with the configurator's
    KV quant method (``_build_mha_quant_method``: runtime_ext's, through its hook)."""
    from sglang.srt.runtime_context import get_exec, get_parallel

    info = configurator.layer_info
    return C8NPUMHATokenToKVPool(
        max_total_num_tokens,
        page_size=configurator.pool_page_size,
        dtype=configurator.kv_cache_dtype,
        head_num=configurator.model_config.get_num_kv_heads(get_parallel().attn_tp_size, get_parallel().attn_dcp_size),
        head_dim=configurator.model_config.head_dim,
        layer_num=info.num_effective_layers,
        device=configurator.device,
        enable_memory_saver=get_exec().features.enable_memory_saver,
        start_layer=info.start_layer,
        end_layer=info.end_layer,
        quant_method=configurator._build_mha_quant_method(num_layers=info.num_effective_layers),
    )

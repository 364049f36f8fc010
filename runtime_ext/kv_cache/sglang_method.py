"""The C8 KV methods as SGLang KV-cache quant methods, and the hooks that select them.

SGLang 0.5.23 has no INT8 KV cache (``--kv-cache-dtype`` offers auto/bf16/fp8/fp4). The
plugin adds (``register``):

1. ``C8DynamicKVCacheMethod`` (``c8_dynamic``) and ``C8StaticKVCacheMethod`` (``c8_static``,
   scales from the file named by ``STRUCTSERVE_KV_CALIBRATION``) in
   ``KV_CACHE_QUANT_REGISTRY``, each with a PLAIN
   access for CPU/NPU attention backends (stored int8, read dequantized): int8 K/V
   ``[size, H, D]`` plus float32 scales ``[size, H]`` per layer; scales are computed when
   a token is stored (absmax/127 per token and head) through the ops dispatch table.
2. An AROUND hook on ``configure_kv_cache_dtype`` mapping our names to int8 storage
   (and remembering the model dtype, which reads dequantize to).
3. An AROUND hook on ``KVCacheConfigurator._build_mha_quant_method`` returning our
   method when that name was configured.

``compute_cell_size`` counts what is stored: ``(H*D + 2*H) * layers * 2`` bytes per token
(int8 values + float16 scales, K and V): 0.516x of bf16 for head_dim 64, 0.508x for 128.
"""

from __future__ import annotations

from typing import Any

C8_DYNAMIC = "c8_dynamic"
C8_STATIC = "c8_static"
KV_METHODS = (C8_DYNAMIC, C8_STATIC)
CALIBRATION_ENV = "STRUCTSERVE_KV_CALIBRATION"  # the static scales file, set by the service
CONFIGURE_TARGET = "sglang.srt.mem_cache.kv_cache_dtype.configure_kv_cache_dtype"
BUILD_TARGET = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._build_mha_quant_method"
_ATTENTION_BACKENDS = frozenset({"torch_native", "ascend", "intel_amx", "triton"})
SCALE_BYTES = 2  # float16 scales
_selected: dict[str, Any] = {}


def c8_cell_size(head_num: int, head_dim: int, num_layers: int) -> int:
    """Bytes per token: int8 K and V values plus one float16 scale per head for each."""
    return (head_num * head_dim + SCALE_BYTES * head_num) * num_layers * 2


def _method_class() -> type:
    import torch
    from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import KVCacheQuantMethodBase

    from runtime_ext.ops import get_op

    class C8DynamicKVCacheMethod(KVCacheQuantMethodBase):
        name = C8_DYNAMIC
        SCALE_BLOCK_SIZE = 1

        def __init__(self, dtype: Any = torch.bfloat16) -> None:
            self.dtype = dtype

        def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
            def values():
                return [torch.zeros((size, head_num, head_dim), dtype=torch.int8, device=device)
                        for _ in range(layer_num)]

            def scales():
                return [torch.zeros((size, head_num), dtype=torch.float16, device=device) for _ in range(layer_num)]

            return {"k_buffer": values(), "v_buffer": values(), "k_scale_buffer": scales(),
                    "v_scale_buffer": scales(), "dq_k_buffer": None, "dq_v_buffer": None, "store_dtype": torch.int8}

        def quantize_and_store(self, k_buffer, v_buffer, k_scale_buffer, v_scale_buffer, loc, cache_k, cache_v,
                               k_scale=None, v_scale=None, native_k_scale_buffer=None,
                               native_v_scale_buffer=None) -> None:
            quantize = get_op("kv_quantize_per_token", k_buffer.device.type)
            for buf, scale_buf, x in ((k_buffer, k_scale_buffer, cache_k), (v_buffer, v_scale_buffer, cache_v)):
                q, s = quantize(x.reshape(-1, *buf.shape[1:]), torch.float16)
                buf[loc] = q
                scale_buf[loc] = s

        def dequantize_kv_tensor(self, tensor, scales, layer_id, dtype=None):
            return get_op("kv_dequantize_per_token", tensor.device.type)(tensor, scales, dtype or self.dtype)

        def dequantize_prev_kv(self, k_q, k_scales, v_q, v_scales, layer_id):
            return (self.dequantize_kv_tensor(k_q, k_scales, layer_id),
                    self.dequantize_kv_tensor(v_q, v_scales, layer_id))

        def compute_cell_size(self, head_num, head_dim, num_layers, kv_size) -> int:
            return c8_cell_size(head_num, head_dim, num_layers)

    class C8StaticKVCacheMethod(C8DynamicKVCacheMethod):
        """C8-S: per layer / K-or-V / head / channel scales from ``structserve kv calibrate``,
        read-only at run time; values beyond the calibrated range are clamped. The pool's
        per-layer "scale buffers" are these static ``[H, D]`` tensors (no per-token scales)."""

        name = C8_STATIC

        def create_buffers(self, size, head_num, head_dim, layer_num, device) -> dict:
            import os
            from pathlib import Path

            from runtime_ext.kv_cache.calibration import load_calibration

            calib = load_calibration(Path(os.environ[CALIBRATION_ENV]), layer_num, head_num, head_dim)
            bufs = super().create_buffers(size, head_num, head_dim, layer_num, device)

            def scales(rows):
                return [torch.tensor(r, dtype=torch.float32, device=device) for r in rows]

            bufs["k_scale_buffer"], bufs["v_scale_buffer"] = scales(calib.k_scale), scales(calib.v_scale)
            return bufs

        def quantize_and_store(self, k_buffer, v_buffer, k_scale_buffer, v_scale_buffer, loc, cache_k, cache_v,
                               k_scale=None, v_scale=None, native_k_scale_buffer=None,
                               native_v_scale_buffer=None) -> None:
            quantize = get_op("kv_quantize_static", k_buffer.device.type)
            for buf, scale, x in ((k_buffer, k_scale_buffer, cache_k), (v_buffer, v_scale_buffer, cache_v)):
                buf[loc] = quantize(x.reshape(-1, *buf.shape[1:]), scale)

        def dequantize_kv_tensor(self, tensor, scales, layer_id, dtype=None):
            return get_op("kv_dequantize_static", tensor.device.type)(tensor, scales, dtype or self.dtype)

        def compute_cell_size(self, head_num, head_dim, num_layers, kv_size) -> int:
            return head_num * head_dim * num_layers * 2  # int8 K and V; the scales are per layer, not per token

    return C8DynamicKVCacheMethod, C8StaticKVCacheMethod


def _configure(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``configure_kv_cache_dtype``: our names store int8."""
    import torch

    name = kwargs.get("server_args_kv_cache_dtype")
    if name not in KV_METHODS:
        return original(*args, **kwargs)
    _selected["name"], _selected["model_dtype"] = name, kwargs.get("model_dtype")
    return name, torch.int8


def _build(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``_build_mha_quant_method``: our method when one of our names was configured."""
    import torch

    if _selected.get("name") in KV_METHODS and self.kv_cache_dtype == torch.int8:
        from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import get_kv_cache_quant_method

        method = get_kv_cache_quant_method(_selected["name"], dtype=_selected.get("model_dtype") or torch.bfloat16)
        _selected["built"] = method.name
        return method
    return original(self, *args, **kwargs)


def built_method() -> str:
    """The KV method this process's pool was built with ("unquantized" unless one of ours)."""
    return _selected.get("built", "unquantized")


def register(hooks: Any, hook_type: Any) -> None:
    import torch
    from sglang.srt.layers.quantization import fp4_kv_cache_quant_method as fp4

    matcher = fp4.KVCacheBackendMatcher(exact=_ATTENTION_BACKENDS)
    for cls in _method_class():
        fp4.KV_CACHE_QUANT_REGISTRY[cls.name] = cls
        fp4.KV_CACHE_ATTENTION_ACCESS_REGISTRY[cls.name] = tuple(
            fp4.KVCacheAttentionAccess(phase, fp4.KVCacheAttentionAccessKind.PLAIN, matcher,
                                       storage_dtype=torch.int8, attention_kv_dtype=torch.bfloat16)
            for phase in (fp4.KVCacheAttentionPhase.PREFILL, fp4.KVCacheAttentionPhase.DECODE)
        )
    hooks.register(CONFIGURE_TARGET, _configure, hook_type.AROUND)
    hooks.register(BUILD_TARGET, _build, hook_type.AROUND)

"""``torch_native`` attention that reads only what it needs (imports sglang and torch).

SGLang 0.5.23's ``TorchNativeAttnBackend`` has two costs we remove here:

1. **Extend recomputes the cached prefix.** For a request with ``p`` cached tokens and ``n``
   new ones it builds a ``[H, p + n, D]`` query (the first ``p`` rows uninitialised) and runs
   causal SDPA over all ``p + n`` queries, then keeps the last ``n``. Here only the ``n``
   new queries attend, with the causal mask shifted by ``p`` (query ``i`` sees keys
   ``0 .. p + i``), so a prefix-cache hit costs O(n·(p+n)) instead of O((p+n)²).
2. **Quantized caches are dequantized whole.** ``get_key_buffer`` on an INT8 pool returns
   the whole layer's buffer dequantized, every layer, every step. Here, for runtime_ext's
   C8 methods, only each request's rows are gathered and dequantized (``method.gather``).
   Rows a method stores Hadamard-rotated stay rotated: the query is rotated instead (and the
   output rotated back when V is), ``runtime_ext.kv_cache.rotation``.

Anything else (cross-attention, encoder lengths, sliding windows, other quant methods)
goes to the upstream code unchanged. ``RuntimeExtConfig.attention == "sglang"`` keeps the upstream
backend (for A/B measurements).
"""

from __future__ import annotations

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from torch.nn.functional import scaled_dot_product_attention

from runtime_ext.config import RuntimeExtConfig


class StructserveNativeAttnBackend(TorchNativeAttnBackend):
    def _plain(self, layer) -> bool:
        return (
            not layer.is_cross_attention
            and layer.attn_type != AttentionType.ENCODER_ONLY
            and (layer.sliding_window_size is None or layer.sliding_window_size < 0)
        )

    def _method(self):
        """runtime_ext's C8 method of the pool (None for any other cache)."""
        pool = self.token_to_kv_pool
        method = getattr(pool, "quant_method", None)
        return method if getattr(pool, "is_quantized_kv_cache", False) and hasattr(method, "gather") else None

    def _reader(self, layer_id: int, method):
        """``read(locs) -> (k, v)`` rows ``[T, H, D]`` of this layer in the model dtype, as stored
        (a C8 ``method``'s rotated sides stay rotated: ``_run`` rotates the query and the output)."""
        pool = self.token_to_kv_pool
        if method is not None:
            local = layer_id - pool.start_layer
            k, v = pool.k_buffer[local], pool.v_buffer[local]
            ks, vs = pool.k_scale_buffer[local], pool.v_scale_buffer[local]
            return lambda locs: (method.gather(k, ks, locs), method.gather(v, vs, locs))
        k_all, v_all = pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)
        return lambda locs: (k_all[locs], v_all[locs])

    def _attend(self, q, k, v, prefix: int, layer) -> torch.Tensor:
        """q ``[n, Hq, D]`` against k/v ``[prefix + n, Hkv, D]`` -> ``[n, Hq, Dv]``."""
        n = q.shape[0]
        q, k, v = q.movedim(0, 1), k.movedim(0, 1).to(q.dtype), v.movedim(0, 1).to(q.dtype)
        mask = None
        if prefix and n > 1:
            mask = torch.ones(n, prefix + n, dtype=torch.bool, device=q.device).tril_(diagonal=prefix)
        out = scaled_dot_product_attention(
            q.unsqueeze(0),
            k.unsqueeze(0),
            v.unsqueeze(0),
            attn_mask=mask,
            scale=layer.scaling,
            is_causal=not prefix and n > 1,
            enable_gqa=layer.tp_q_head_num != layer.tp_k_head_num,
        )
        return out.squeeze(0).movedim(1, 0)

    def _store(self, layer, forward_batch, k, v, save_kv_cache) -> None:
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc(forward_batch.out_cache_loc, self.swa_out_cache_loc), k, v
            )

    def _run(self, q, layer, forward_batch, new_lens, prefix_lens) -> torch.Tensor:
        q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
        method = self._method()
        rotation = getattr(method, "rotation", None)
        if rotation is not None and rotation.keys:  # (q H)(k H)ᵀ = q kᵀ
            q_ = rotation.rotate(q_)
        o = q_.new_empty((q_.shape[0], layer.tp_q_head_num, layer.v_head_dim))
        read = self._reader(layer.layer_id, method)
        req_to_token = self.req_to_token_pool.req_to_token
        start = 0
        for row, n, p in zip(forward_batch.req_pool_indices.tolist(), new_lens, prefix_lens):
            locs = req_to_token[row, : p + n]
            k, v = read(locs)
            o[start : start + n] = self._attend(q_[start : start + n], k, v, p, layer)
            start += n
        if rotation is not None and rotation.values:  # softmax(·)(v H) H = softmax(·) v
            o = rotation.rotate(o)
        return o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if not self._plain(layer) or forward_batch.encoder_lens is not None:
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
        self._store(layer, forward_batch, k, v, save_kv_cache)
        return self._run(
            q,
            layer,
            forward_batch,
            _cpu(forward_batch.extend_seq_lens_cpu, forward_batch.extend_seq_lens),
            _cpu(forward_batch.extend_prefix_lens_cpu, forward_batch.extend_prefix_lens),
        )

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if not self._plain(layer) or forward_batch.encoder_lens is not None:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        self._store(layer, forward_batch, k, v, save_kv_cache)
        seq_lens = _cpu(forward_batch.seq_lens_cpu, forward_batch.seq_lens)
        return self._run(q, layer, forward_batch, [1] * len(seq_lens), [s - 1 for s in seq_lens])


def _cpu(host, device_tensor) -> list[int]:
    """A per-request length list, from the host copy when the batch has one."""
    if host is None:
        return device_tensor.tolist()
    return host.tolist() if isinstance(host, torch.Tensor) else list(host)


def register() -> None:
    """Make SGLang's ``torch_native`` name build this backend (unless the config's attention is sglang)."""
    if RuntimeExtConfig.from_env().attention == "sglang":
        return
    from sglang.srt.layers.attention import attention_registry

    attention_registry.ATTENTION_BACKENDS["torch_native"] = StructserveNativeAttnBackend

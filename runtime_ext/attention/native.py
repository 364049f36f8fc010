"""``torch_native`` attention that reads only what it needs (imports sglang and torch).

SGLang 0.5.23's ``TorchNativeAttnBackend`` has three costs we remove here:

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
3. **Decode loops over the requests.** Here a decode step gathers (and, for C8, dequantizes)
   the whole batch's rows once per layer and runs one attention call (``batched.py``). An
   extend's short requests that compute output tokens only (at most ``SHORT_EXTEND`` of them: the
   running decodes a mixed step carries, a grammar's forced span) join that call too, each new
   token as a row that attends to its request's rows up to itself: what decoding them one by one
   computes. Prompt tokens always take the per-request path, so a prompt computes alike whether
   the prefix cache held part of it or not (a seeded request repeats its text).
   ``RuntimeExtConfig.attention == "per_request"`` keeps the per-request loop, the reference
   the batched path is tested against (and the A/B arm of ``bench/decode_attention.py``).

Anything else (cross-attention, encoder lengths, sliding windows, other quant methods)
goes to the upstream code unchanged. ``RuntimeExtConfig.attention == "sglang"`` keeps the upstream
backend (for A/B measurements).
"""

from __future__ import annotations

from itertools import accumulate

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from torch.nn.functional import scaled_dot_product_attention

from runtime_ext.attention.batched import DecodeRows, attend
from runtime_ext.config import RuntimeExtConfig
from runtime_ext.ops import attention_cpu
from runtime_ext.ops.kv_ref import take_rows
from runtime_ext.state import AttentionStats

SHORT_EXTEND = 16
"""An extend request of at most this many new output tokens runs as that many decode rows (longer
ones: one SDPA per request, whose one pass over the rows beats reading them once per token)."""
INIT_TARGET = "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new"
_MARKED: tuple[tuple[str, ...], list[bool]] | None = None  # the last extend's request ids and ``mark_outputs``


class StructserveNativeAttnBackend(TorchNativeAttnBackend):
    batched_decode = True  # False: the per-request reference loop (``attention: per_request``)
    stats = AttentionStats("structserve")  # the plugin's, once registered (counts decode calls per path)
    _decode_rows: tuple[object, list[int], DecodeRows] | None = None  # (forward batch, seq_lens, rows):
    # built by the first layer of a forward, reused by its other layers
    _extend_plan: tuple | None = None  # (forward batch, its lengths and request ids, its ``_short_rows``)

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
        return lambda locs: (take_rows(k_all, locs), take_rows(v_all, locs))

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

    def _run(self, q, layer, attention) -> torch.Tensor:
        """``attention(q, read) -> o[T, Hq, Dv]`` in the stored space (rotated sides: the query
        is rotated going in, the output coming out), as ``[T, Hq · Dv]``."""
        method = self._method()
        rotation = getattr(method, "rotation", None)
        q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
        if rotation is not None and rotation.keys:  # (q H)(k H)ᵀ = q kᵀ
            q_ = rotation.rotate(q_)
        o = attention(q_, self._reader(layer.layer_id, method))
        if rotation is not None and rotation.values:  # softmax(·)(v H) H = softmax(·) v
            o = rotation.rotate(o)
        return o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)

    def _per_request(self, layer, forward_batch, new_lens: list[int], prefix_lens: list[int], skip=frozenset()):
        """Each request's ``n`` new queries against its ``p + n`` rows, one request at a time
        (the requests at the indices in ``skip`` left out: their outputs stay unwritten)."""

        def attention(q, read):
            o = q.new_empty((q.shape[0], layer.tp_q_head_num, layer.v_head_dim))
            req_to_token = self.req_to_token_pool.req_to_token
            start = 0
            for i, (row, n, p) in enumerate(zip(forward_batch.req_pool_indices.tolist(), new_lens, prefix_lens)):
                if i not in skip:
                    k, v = read(req_to_token[row, : p + n])
                    o[start : start + n] = self._attend(q[start : start + n], k, v, p, layer)
                start += n
            return o

        return attention

    def _extend(self, layer, forward_batch, new_lens: list[int], prefix_lens: list[int]):
        """An extend batch: the new tokens of its short requests of output tokens (``SHORT_EXTEND``,
        ``mark_outputs``) as rows of one batched decode call, the others one request at a time."""
        key = (new_lens, prefix_lens, forward_batch.rids)
        plan = self._extend_plan
        if plan is None or plan[0] is not forward_batch or plan[1] != key:  # a runner may refill one object
            self._extend_plan = plan = (forward_batch, key, self._short_rows(forward_batch, new_lens, prefix_lens))
        if plan[2] is None:
            return self._per_request(layer, forward_batch, new_lens, prefix_lens)
        short, at, pools, seq_lens = plan[2]
        rest = self._per_request(layer, forward_batch, new_lens, prefix_lens, skip=short)
        rows = self._batched_decode(layer, forward_batch, seq_lens, pools)
        every = len(short) == len(new_lens)

        def attention(q, read):
            o = q.new_empty((q.shape[0], layer.tp_q_head_num, layer.v_head_dim)) if every else rest(q, read)
            o[at] = rows(q[at], read)
            return o

        return attention

    def _short_rows(self, forward_batch, new_lens: list[int], prefix_lens: list[int]):
        """(requests, query rows, their pool rows, lengths) of an extend's short requests of output
        tokens, or None when it has none (once per forward: every layer reuses it)."""
        rids = tuple(forward_batch.rids or ())
        outputs = _MARKED[1] if _MARKED is not None and _MARKED[0] == rids else [False] * len(new_lens)
        short = [i for i, n in enumerate(new_lens) if n <= SHORT_EXTEND and outputs[i]] if self.batched_decode else []
        if not short:
            return None
        starts = list(accumulate(new_lens, initial=0))
        tokens = [(i, t) for i in short for t in range(new_lens[i])]
        at = torch.tensor([starts[i] + t for i, t in tokens])
        pools = forward_batch.req_pool_indices[torch.tensor([i for i, _ in tokens])]
        self.stats.extend_decode_rows += len(tokens)
        return frozenset(short), at, pools, [prefix_lens[i] + t + 1 for i, t in tokens]

    def _rows(self, forward_batch, seq_lens: list[int], pools) -> DecodeRows:
        """The batch's cache locations, built by a forward's first layer and reused by the others."""
        cached = self._decode_rows
        if cached is None or cached[0] is not forward_batch or cached[1] != seq_lens:
            req_to_token = self.req_to_token_pool.req_to_token
            rows = DecodeRows.of(req_to_token, pools, seq_lens)
            self._decode_rows = cached = (forward_batch, seq_lens, rows)
        return cached[2]

    def _in_place(self, q, layer, rows: DecodeRows):
        """The compiled decode attention over the bf16 pool rows in place (``ops/attention_cpu``), or
        None when it does not take the call (a C8 pool: its method's read; no library; other dtypes)."""
        if self._method() is not None:
            return None
        pool = self.token_to_kv_pool
        k, v = pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id)
        return attention_cpu.decode(q, k, v, rows.locs, rows.lens, layer.scaling)

    def _batched_decode(self, layer, forward_batch, seq_lens: list[int], pools=None):
        """One attention call for the whole decode batch (``pools``: each row's request, default the
        batch's): the compiled one over the pool in place, else one gather and SDPA (``batched.py``)."""
        pools = forward_batch.req_pool_indices if pools is None else pools

        def attention(q, read):
            rows = self._rows(forward_batch, seq_lens, pools)
            if (out := self._in_place(q, layer, rows)) is not None:
                return out
            b, length = rows.shape
            k, v = read(rows.locs.reshape(-1))
            k, v = k.view(b, length, *k.shape[1:]), v.view(b, length, *v.shape[1:])
            return attend(q, k, v, rows.valid, layer.scaling)

        return attention

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if not self._plain(layer) or forward_batch.encoder_lens is not None:
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
        self._store(layer, forward_batch, k, v, save_kv_cache)
        new_lens = _cpu(forward_batch.extend_seq_lens_cpu, forward_batch.extend_seq_lens)
        prefix_lens = _cpu(forward_batch.extend_prefix_lens_cpu, forward_batch.extend_prefix_lens)
        return self._run(q, layer, self._extend(layer, forward_batch, new_lens, prefix_lens))

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if not self._plain(layer) or forward_batch.encoder_lens is not None:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        self._store(layer, forward_batch, k, v, save_kv_cache)
        seq_lens = _cpu(forward_batch.seq_lens_cpu, forward_batch.seq_lens)
        if self.batched_decode:
            self.stats.batched_decode_calls += 1
            return self._run(q, layer, self._batched_decode(layer, forward_batch, seq_lens))
        self.stats.per_request_decode_calls += 1
        return self._run(
            q, layer, self._per_request(layer, forward_batch, [1] * len(seq_lens), [s - 1 for s in seq_lens])
        )


def _cpu(host, device_tensor) -> list[int]:
    """A per-request length list, from the host copy when the batch has one."""
    if host is None:
        return device_tensor.tolist()
    return host.tolist() if isinstance(host, torch.Tensor) else list(host)


def mark_outputs(forward_batch, _cls, batch, *_args, **_kwargs):
    """AFTER hook on ``ForwardBatch.init_new``: for an extend, per request whether every new token
    is an output token (its cached prefix covers the prompt: a mixed step's running decode, a
    fast-forward span); only those may run as decode rows (``_extend``). Kept by request ids: the
    model runner may copy the forward batch's fields into another object before the forward."""
    global _MARKED
    prefix_lens = forward_batch.extend_prefix_lens_cpu
    if forward_batch.forward_mode.is_extend() and prefix_lens is not None and forward_batch.rids is not None:
        marks = [len(req.origin_input_ids) <= p for req, p in zip(batch.reqs, list(prefix_lens))]
        _MARKED = (tuple(forward_batch.rids), marks)
    return forward_batch


def register(stats: AttentionStats, hooks, hook_type) -> None:
    """Make SGLang's ``torch_native`` name build this backend (unless the config's attention is
    sglang) and mark extends' output-only requests (``mark_outputs``); ``stats`` records which and
    counts its decode calls."""
    stats.impl = attention = RuntimeExtConfig.from_env().attention
    if attention == "sglang":
        return
    StructserveNativeAttnBackend.batched_decode = attention != "per_request"
    StructserveNativeAttnBackend.stats = stats
    hooks.register(INIT_TARGET, mark_outputs, hook_type.AFTER)
    from sglang.srt.layers.attention import attention_registry

    attention_registry.ATTENTION_BACKENDS["torch_native"] = StructserveNativeAttnBackend

"""The twin's emulation of the two ATB attention ops SGLang's ``ascend`` backend calls on MHA models
(default path, ``ASCEND_USE_FIA`` unset): each checks its documented contract, then computes
attention in float32 over the paged cache and writes ``out`` in place.

- ``_npu_paged_attention`` (decode): op-plugin binds it to ATB PagedAttentionOperation with no
  dequant fusion (no ``kDescale``/``vDescale`` inputs). Page (CANN 8.2.RC1): query
  ``[num_tokens, num_head, head_size]`` float16/bf16 (int8 only with full quantization);
  keyCache/valueCache ``[num_blocks, block_size, kv_head_num, head_size]``, int8 only "when dequant
  fusion or full quantization is on", so here of the query's dtype; blockTables
  ``[num_tokens, max_num_blocks_per_query]`` int32, values in ``[0, num_blocks)`` (CANN 7.0 page);
  contextLens ``[batch]`` int32 on the host; ``block_size * head_size <= 128 * 128``;
  headNum a multiple of kvHeadNum.
- ``_npu_flash_attention_qlens`` (extend with a prefix in the cache): op-plugin binds it to ATB
  SelfAttentionOperation with ``calcType=PREFIX_ENCODER``, ``maskType=MASK_TYPE_NORM_COMPRESS``,
  ``quantType=TYPE_QUANT_UNQUANT``, ``isTriuMask=1``, layout BSND. The PREFIX_ENCODER page:
  query ``[nTokens, qHiddenSize]`` or ``[nTokens, headNum, headSize]`` float16/bf16, headSize a
  multiple of 16; key/value caches ``[numBlocks, blockSize, headNum, headSize]`` float16/bf16 of
  one shape, **blockSize 128**, headSize <= 128; blockTables ``[batch, maxBlockNum]`` int32 with
  ``max(kvSeqLen) / blockSize <= maxBlockNum``; seqLen and kvSeqLen ``[batch]`` int32 on the host;
  the prefix (kvSeqLen - seqLen) 128-aligned. The compressed causal mask is SGLang's
  ``[128, 128]`` upper-triangle mask in the query's dtype; the op applies causality itself
  (query token ``i`` of a request sits at position ``kvSeqLen - seqLen + i``).
"""

from __future__ import annotations

import torch

from tests.unit.runtime_ext import npu_contracts as contract

PAGED = "_npu_paged_attention"
QLENS = "_npu_flash_attention_qlens"
contract.PAGE.update(
    {
        PAGED: "https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1/API/ascendtbapi/ascendtb_01_0206.html",
        f"{PAGED}/7.0": "https://www.hiascend.com/document/detail/zh/canncommercial/700/foundmodeldev/ascendtb/ascendtb_01_0075.html",
        QLENS: "https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/83RC1alpha002/API/ascendtbapi/ascendtb_01_0283.html",
        f"{QLENS}/op-plugin": "https://gitcode.com/Ascend/op-plugin/blob/master/op_plugin/ops/atb/FlashAttentionQlensAtb.cpp",
    }
)
HALF = (torch.float16, torch.bfloat16)


def _check_caches(op: str, query, key_cache, value_cache, num_heads, num_kv_heads, head_size) -> None:
    for arg, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        want = f"[num_blocks, block_size, {num_kv_heads}, {head_size}]"
        ok = cache.dim() == 4 and tuple(cache.shape[2:]) == (num_kv_heads, head_size)
        contract._require(ok, op, arg, tuple(cache.shape), want)
        # no dequant inputs in this binding: an int8 cache would be read as raw integers
        contract._require(cache.dtype == query.dtype, op, arg, f"dtype {cache.dtype}",
                          f"the query's dtype {query.dtype} (int8 only with dequant fusion: kDescale/vDescale)")  # fmt: skip
    contract._require(num_kv_heads > 0 and num_heads % num_kv_heads == 0, op, "num_kv_heads", num_kv_heads,
                      f"a divisor of num_heads={num_heads}")  # fmt: skip


def _check_table(op: str, block_table, batch: int, num_blocks: int, kv_lens: torch.Tensor, block: int, page=None):
    contract._dtype(op, "block_table", block_table, (torch.int32,), page)
    shape = tuple(block_table.shape)
    contract._require(block_table.dim() == 2 and shape[0] == batch, op, "block_table", shape, f"[{batch}, max_blocks]")
    need = (kv_lens.long() + block - 1) // block
    contract._require(int(need.max()) <= shape[1], op, "block_table", shape, "max(kv_len) / block_size <= max_blocks")
    used = torch.arange(shape[1]).unsqueeze(0) < need.unsqueeze(1)
    inside = (block_table[used] >= 0).all() and (block_table[used] < num_blocks).all()
    contract._require(bool(inside), op, "block_table", "a block outside the cache", f"blocks in [0, {num_blocks})",
                      page or f"{PAGED}/7.0")  # fmt: skip


def _attend(query, key_cache, value_cache, block_table, q_lens, kv_lens, scale, num_kv_heads) -> torch.Tensor:
    """Causal attention per request in float32: request ``b``'s ``q_lens[b]`` query tokens are the
    last of its ``kv_lens[b]`` cached tokens (rows read through its block table)."""
    heads, dim = query.shape[-2:]
    block = key_cache.shape[1]
    out, start = torch.empty(query.shape, dtype=torch.float32), 0
    for b, (q_len, kv_len) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        rows = block_table[b].long().unsqueeze(1) * block + torch.arange(block)
        rows = rows.flatten()[:kv_len]
        k = key_cache.reshape(-1, num_kv_heads, dim)[rows].float().repeat_interleave(heads // num_kv_heads, 1)
        v = value_cache.reshape(-1, num_kv_heads, dim)[rows].float().repeat_interleave(heads // num_kv_heads, 1)
        q = query[start : start + q_len].float()
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        pos = torch.arange(kv_len - q_len, kv_len).unsqueeze(1)
        scores = scores.masked_fill(torch.arange(kv_len).unsqueeze(0) > pos, float("-inf"))
        out[start : start + q_len] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
        start += q_len
    return out


def _npu_paged_attention(*, query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table,
                         context_lens, out) -> None:  # fmt: skip
    op = PAGED
    contract._dtype(op, "query", query, HALF)
    tokens, heads, dim = query.shape if query.dim() == 3 else (None, None, None)
    contract._require(heads == num_heads, op, "query", tuple(query.shape), f"[num_tokens, {num_heads}, head_size]")
    _check_caches(op, query, key_cache, value_cache, num_heads, num_kv_heads, dim)
    block = key_cache.shape[1]
    contract._require(block * dim <= 128 * 128, op, "key_cache", tuple(key_cache.shape), "block_size * head_size <= 128 * 128")  # fmt: skip
    contract._dtype(op, "context_lens", context_lens, (torch.int32,))
    contract._require(
        tuple(context_lens.shape) == (tokens,), op, "context_lens", tuple(context_lens.shape), f"[{tokens}]"
    )
    _check_table(op, block_table, tokens, key_cache.shape[0], context_lens, block)
    contract._require(tuple(out.shape) == tuple(query.shape) and out.dtype == query.dtype, op, "out",
                      (tuple(out.shape), out.dtype), "the query's shape and dtype")  # fmt: skip
    ones = torch.ones_like(context_lens)
    out.copy_(_attend(query, key_cache, value_cache, block_table, ones, context_lens, scale_value, num_kv_heads))


def _npu_flash_attention_qlens(*, query, key_cache, value_cache, block_table, mask, seq_len, context_lens,
                               num_kv_heads, num_heads, scale_value, out) -> None:  # fmt: skip
    op = QLENS
    contract._dtype(op, "query", query, HALF)
    dim = key_cache.shape[-1]
    q = query.reshape(query.shape[0], num_heads, -1) if query.dim() == 2 else query
    contract._require(q.shape[-2:] == (num_heads, dim) and dim % 16 == 0 and dim <= 128, op, "query",
                      tuple(query.shape), f"[nTokens, {num_heads} * headSize], headSize 16-aligned, <= 128")  # fmt: skip
    _check_caches(op, query, key_cache, value_cache, num_heads, num_kv_heads, dim)
    contract._require(key_cache.shape == value_cache.shape, op, "value_cache", tuple(value_cache.shape), "key's shape")
    contract._require(key_cache.shape[1] == 128, op, "key_cache", tuple(key_cache.shape), "blockSize 128")
    for arg, t in (("seq_len", seq_len), ("context_lens", context_lens)):
        contract._dtype(op, arg, t, (torch.int32,))
    contract._require(seq_len.shape == context_lens.shape and int(seq_len.sum()) == q.shape[0], op, "seq_len",
                      seq_len.tolist(), f"[batch] summing to nTokens={q.shape[0]}")  # fmt: skip
    prefix = context_lens - seq_len
    contract._require(bool((prefix >= 0).all() and (prefix % 128 == 0).all()), op, "context_lens",
                      context_lens.tolist(), "kvSeqLen - seqLen >= 0 and 128-aligned")  # fmt: skip
    contract._require(tuple(mask.shape) == (128, 128) and mask.dtype == query.dtype, op, "mask",
                      (tuple(mask.shape), mask.dtype), "the [128, 128] compressed causal mask in the query's dtype")  # fmt: skip
    _check_table(op, block_table, seq_len.shape[0], key_cache.shape[0], context_lens, 128)
    contract._require(out.numel() == query.numel() and out.dtype == query.dtype, op, "out",
                      (tuple(out.shape), out.dtype), "the query's size and dtype")  # fmt: skip
    result = _attend(q, key_cache, value_cache, block_table, seq_len, context_lens, scale_value, num_kv_heads)
    out.copy_(result.reshape(out.shape))


OPS = {PAGED: _npu_paged_attention, QLENS: _npu_flash_attention_qlens}

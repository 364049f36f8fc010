"""The ``torch_npu`` callables the twin provides (``OPS``): each emulated op checks its documented
contract, then computes the documented result; the rest of ``torch_npu`` raises ``NotEmulated``.

- runtime_ext's quantization ops: the strict emulations of ``tests/unit/runtime_ext/npu_emulation.py``
  (contracts in ``npu_contracts.py``, table in docs/npu-contracts.md).
- ``_npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices)``: SGLang's NPU KV
  store (``NPUMHATokenToKVPool.set_kv_buffer`` without FIA). op-plugin binds it to ATB's
  ReshapeAndCacheOperation (``PAGE["_npu_reshape_and_cache"]``): each token's ``key[t]`` /
  ``value[t]`` (``[num_heads, head_size]``) is written in place at cache row ``slot_indices[t]``
  (``block_id * block_size + offset_in_block``) of ``key_cache`` / ``value_cache``
  (``[num_blocks, block_size, num_heads, head_size]``).
- ``_npu_paged_attention`` / ``_npu_flash_attention_qlens``: the ``ascend`` backend's MHA decode and
  extend (``attention_ops.py``).
- ``_apply_patches(patches)``: torch_npu's own hook for replacing ``torch`` names (SGLang passes its
  profiler names); the twin keeps torch's CPU profiler, so it patches nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.npu_twin import attention_ops, model_ops
from tests.unit.runtime_ext import npu_contracts as contract
from tests.unit.runtime_ext import npu_emulation

RESHAPE_AND_CACHE = "_npu_reshape_and_cache"
KV_DTYPES = (torch.float16, torch.bfloat16, torch.int8)


def check_reshape_and_cache(key, value, key_cache, value_cache, slot_indices) -> None:
    op = RESHAPE_AND_CACHE
    # ATB ReshapeAndCacheOperation (CANN 8.0.RC2): key [num_tokens, num_head, head_size], float16/bf16/int8, ND
    for arg, t in (("key", key), ("value", value)):
        contract._dtype(op, arg, t, KV_DTYPES)
        contract._require(t.dim() == 3, op, arg, f"{t.dim()}-D", "[num_tokens, num_head, head_size]")
    for arg, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        contract._require(t.dim() == 4, op, arg, f"{t.dim()}-D", "[num_blocks, block_size, num_head, head_size] (ND)")
    # "key、value、keyCache、valueCache、keyCacheOut、valueCacheOut的数据类型都必须完全一致"
    same = {key.dtype, value.dtype, key_cache.dtype, value_cache.dtype}
    contract._require(len(same) == 1, op, "key/value/key_cache/value_cache", sorted(map(str, same)), "one dtype")
    for arg, t, cache in (("key", key, key_cache), ("value", value, value_cache)):
        want = tuple(cache.shape[2:])
        contract._require(tuple(t.shape[1:]) == want, op, arg, tuple(t.shape), f"[num_tokens, {want[0]}, {want[1]}]")
    # slotMapping: [num_tokens] int32, each token's offset in the cache (block_id * block_size + offset)
    contract._dtype(op, "slot_indices", slot_indices, (torch.int32,))
    n = key.shape[0]
    shape = tuple(slot_indices.shape)
    contract._require(shape == (n,) and value.shape[0] == n, op, "slot_indices", shape, f"[num_tokens={n}]")
    rows = key_cache.shape[0] * key_cache.shape[1]  # an offset into the cache (the page's definition)
    ok = n == 0 or (int(slot_indices.min()) >= 0 and int(slot_indices.max()) < rows)
    contract._require(ok, op, "slot_indices", "an offset outside the cache", f"offsets in [0, {rows})")


def _npu_reshape_and_cache(*, key, value, key_cache, value_cache, slot_indices) -> None:
    check_reshape_and_cache(key, value, key_cache, value_cache, slot_indices)
    rows = slot_indices.long()
    for src, cache in ((key, key_cache), (value, value_cache)):
        cache.view(-1, *cache.shape[2:])[rows] = src  # in place: the cache is the output


def _apply_patches(_patches: Any) -> None:
    return None


OPS: dict[str, Any] = {
    name: getattr(npu_emulation, name)
    for name in (
        "npu_dynamic_quant",
        "npu_quantize",
        "npu_anti_quant",
        "npu_quant_matmul",
        "npu_weight_quant_batchmatmul",
        "npu_convert_weight_to_int4pack",
        "npu_linear",
        "npu_format_cast",
    )
}
OPS.update(
    {RESHAPE_AND_CACHE: _npu_reshape_and_cache, "_apply_patches": _apply_patches, **attention_ops.OPS, **model_ops.OPS}
)

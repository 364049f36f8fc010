"""The twin's emulations of SGLang's NPU KV store op ``_npu_reshape_and_cache`` (tests/npu_twin/ops.py)
and the ascend backend's attention ops ``_npu_paged_attention`` / ``_npu_flash_attention_qlens``
(attention_ops.py), against their documented contracts. Plain torch: runs in this process."""

from __future__ import annotations

import pytest
import torch

from tests.npu_twin.attention_ops import PAGED, QLENS
from tests.npu_twin.ops import OPS, RESHAPE_AND_CACHE
from tests.unit.runtime_ext.npu_contracts import PAGE, ContractViolation

BLOCKS, BLOCK, HEADS, DIM = 3, 16, 2, 8


def _call(key=None, cache_dtype=torch.bfloat16, slots=None, heads=HEADS):
    key = torch.randn(4, heads, DIM, dtype=torch.bfloat16) if key is None else key
    caches = [torch.zeros(BLOCKS, BLOCK, HEADS, DIM, dtype=cache_dtype) for _ in range(2)]
    slots = torch.tensor([0, 17, 18, 47], dtype=torch.int32) if slots is None else slots
    OPS[RESHAPE_AND_CACHE](key=key, value=-key, key_cache=caches[0], value_cache=caches[1], slot_indices=slots)
    return key, caches


def test_each_token_lands_at_its_slot_in_place():
    key, (key_cache, value_cache) = _call()
    rows = key_cache.view(-1, HEADS, DIM)
    assert torch.equal(rows[[0, 17, 18, 47]], key) and torch.equal(value_cache.view(-1, HEADS, DIM)[17], -key[1])
    assert rows.abs().sum(dim=(1, 2)).nonzero().flatten().tolist() == [0, 17, 18, 47]  # nothing else written


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"cache_dtype": torch.int8}, "key/value/key_cache/value_cache"),  # bf16 K/V into an int8 cache
        ({"key": torch.randn(4, HEADS, DIM)}, "key"),  # float32 is not a documented dtype
        ({"slots": torch.tensor([0, 1, 2, 3])}, "slot_indices"),  # int64: the page says int32
        ({"slots": torch.tensor([0, 1, 2, BLOCKS * BLOCK], dtype=torch.int32)}, "slot_indices"),  # past the cache
        ({"heads": 3}, "key"),  # head count other than the cache's
    ],
)
def test_documented_contract_is_enforced(kwargs, arg):
    with pytest.raises(ContractViolation) as err:
        _call(**kwargs)
    assert err.value.arg == arg and err.value.page == PAGE[RESHAPE_AND_CACHE]


def _paged(dtype=torch.bfloat16, block=16, table=None, lens=(5, 20)):
    """Two requests over a shuffled paged cache: (kwargs for ``_npu_paged_attention``, each request's rows)."""
    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(4, block, HEADS, DIM, generator=g).to(dtype) for _ in range(2))
    table = torch.tensor([[2, 0], [3, 1]], dtype=torch.int32) if table is None else table
    query = torch.randn(2, 2 * HEADS, DIM, generator=g).to(torch.bfloat16)
    kwargs = dict(query=query, key_cache=k, value_cache=v, num_kv_heads=HEADS, num_heads=2 * HEADS,
                  scale_value=DIM**-0.5, block_table=table, context_lens=torch.tensor(lens, dtype=torch.int32),
                  out=torch.empty_like(query))  # fmt: skip
    rows = [(table[b].long().unsqueeze(1) * block + torch.arange(block)).flatten()[:n] for b, n in enumerate(lens)]
    return kwargs, rows


def test_paged_attention_reads_each_requests_blocks_in_table_order():
    kwargs, rows = _paged()
    OPS[PAGED](**kwargs)
    for b, r in enumerate(rows):
        k = kwargs["key_cache"].reshape(-1, HEADS, DIM)[r].float().repeat_interleave(2, 1)
        v = kwargs["value_cache"].reshape(-1, HEADS, DIM)[r].float().repeat_interleave(2, 1)
        p = (torch.einsum("hd,khd->hk", kwargs["query"][b].float(), k) * DIM**-0.5).softmax(-1)
        want = torch.einsum("hk,khd->hd", p, v)
        assert torch.allclose(kwargs["out"][b].float(), want, atol=2e-2)


@pytest.mark.parametrize(
    ("change", "arg"),
    [
        ({"dtype": torch.int8}, "key_cache"),  # an int8 cache read raw: this binding has no dequant scales
        ({"table": torch.tensor([[2, 0], [3, 4]], dtype=torch.int32)}, "block_table"),  # block 4 of 4
        ({"table": torch.tensor([[2, 0], [3, 1]])}, "block_table"),  # int64: the page says int32
        ({"block": 4096}, "key_cache"),  # block_size * head_size > 128 * 128
    ],
)
def test_paged_attention_contract_is_enforced(change, arg):
    kwargs, _ = _paged(**change)
    with pytest.raises(ContractViolation) as err:
        OPS[PAGED](**kwargs)
    assert err.value.arg == arg


QDIM = 16  # the prefix kernel's head size is 16-aligned


def _qlens(block=128, prefix=128, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(1)
    k, v = (torch.randn(3, block, HEADS, QDIM, generator=g).to(dtype) for _ in range(2))
    query = torch.randn(3, 2 * HEADS * QDIM, generator=g).to(torch.bfloat16)
    mask = torch.ones(128, 128).triu(1).to(torch.bfloat16)
    return dict(query=query, key_cache=k, value_cache=v, block_table=torch.tensor([[1, 2]], dtype=torch.int32),
                mask=mask, seq_len=torch.tensor([3], dtype=torch.int32),
                context_lens=torch.tensor([prefix + 3], dtype=torch.int32), num_kv_heads=HEADS,
                num_heads=2 * HEADS, scale_value=QDIM**-0.5, out=torch.empty_like(query))  # fmt: skip


def test_prefix_attention_is_causal_after_the_cached_prefix():
    kwargs = _qlens()
    OPS[QLENS](**kwargs)
    rows = torch.cat([torch.arange(128, 256), torch.arange(256, 259)])  # blocks 1 then 2
    k = kwargs["key_cache"].reshape(-1, HEADS, QDIM)[rows].float().repeat_interleave(2, 1)
    v = kwargs["value_cache"].reshape(-1, HEADS, QDIM)[rows].float().repeat_interleave(2, 1)
    q = kwargs["query"].float().view(3, 2 * HEADS, QDIM)
    for i in range(3):  # query token i sits at position 128 + i: it sees rows 0 .. 128 + i
        p = (torch.einsum("hd,khd->hk", q[i], k[: 129 + i]) * QDIM**-0.5).softmax(-1)
        want = torch.einsum("hk,khd->hd", p, v[: 129 + i]).flatten()
        assert torch.allclose(kwargs["out"][i].float(), want, atol=2e-2)


@pytest.mark.parametrize(
    ("change", "arg"),
    [({"dtype": torch.int8}, "key_cache"), ({"block": 64}, "key_cache"), ({"prefix": 100}, "context_lens")],
)
def test_prefix_attention_contract_is_enforced(change, arg):
    with pytest.raises(ContractViolation) as err:
        OPS[QLENS](**_qlens(**change))
    assert err.value.arg == arg and err.value.page == PAGE[QLENS]

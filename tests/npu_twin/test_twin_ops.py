"""The twin's emulation of SGLang's NPU KV store op, ``_npu_reshape_and_cache`` (tests/npu_twin/ops.py),
against ATB ReshapeAndCacheOperation's documented contract. Plain torch: runs in this process."""

from __future__ import annotations

import pytest
import torch

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

"""The twin's emulations of the ops SGLang's NPU layers call for a Llama decoder (tests/npu_twin/model_ops.py)
against their documented contracts and formulas. Plain torch: runs in this process."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.npu_twin.model_ops import (
    npu_add_rms_norm,
    npu_mrope,
    npu_rms_norm,
    npu_swiglu,
    split_qkv_rmsnorm_rope,
)
from tests.npu_twin.twin import NotEmulated
from tests.unit.runtime_ext.npu_contracts import PAGE, ContractViolation

HEADS, KV_HEADS, DIM, TOKENS = 4, 2, 8, 5


def _x(*shape, dtype=torch.bfloat16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_rms_norm_is_the_documented_formula():
    x, gamma = _x(TOKENS, 16), _x(16, seed=1)
    y, rstd = npu_rms_norm(x, gamma, 1e-5)
    want = x.float() / (x.float().pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * gamma.float()
    assert y.dtype == torch.bfloat16 and rstd.dtype == torch.float32
    torch.testing.assert_close(y.float(), want, rtol=2**-7, atol=1e-6)


def test_add_rms_norm_returns_the_norm_of_the_sum_and_the_sum():
    x1, x2, gamma = _x(TOKENS, 16), _x(TOKENS, 16, seed=2), _x(16, seed=1)
    y, _, x = npu_add_rms_norm(x1, x2, gamma, 1e-5)
    assert torch.equal(x, x1 + x2)
    assert torch.equal(y, npu_rms_norm(x, gamma, 1e-5)[0])


def test_swiglu_is_silu_of_the_first_half_times_the_second():
    x = _x(TOKENS, 32)
    a, b = x.float().chunk(2, dim=-1)
    torch.testing.assert_close(npu_swiglu(x).float(), F.silu(a) * b, rtol=2**-7, atol=1e-6)


def _cache(positions=16, rotary=DIM):
    inv = 1.0 / 10000 ** (torch.arange(0, rotary, 2).float() / rotary)
    freqs = torch.arange(positions).float()[:, None] * inv[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)  # SGLang's cos_sin_cache: cos half, sin half


def _neox_reference(x, cache, positions):
    cos, sin = cache.index_select(0, positions).chunk(2, dim=-1)
    t = x.float().view(x.shape[0], -1, DIM)
    a, b = t.chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(x.shape)


def test_mrope_rope_mode_rotates_each_head_neox_style():
    q, k, positions = _x(TOKENS, HEADS * DIM), _x(TOKENS, KV_HEADS * DIM, seed=3), torch.tensor([0, 1, 2, 7, 15])
    cache = _cache().to(torch.bfloat16)
    q_out, k_out = npu_mrope(positions, q, k, cache, DIM, mrope_section=[0, 0, 0], rotary_mode="half")
    torch.testing.assert_close(q_out.float(), _neox_reference(q, cache.float(), positions), rtol=2**-7, atol=1e-2)
    torch.testing.assert_close(k_out.float(), _neox_reference(k, cache.float(), positions), rtol=2**-7, atol=1e-2)
    assert torch.equal(q_out[0], q[0])  # position 0: cos 1, sin 0


def test_split_qkv_rmsnorm_rope_equals_mrope_on_the_same_positions():
    """SGLang's decode form (sin/cos per token at full rope width, ``get_cos_sin_with_position``)
    rotates as its extend form (``npu_mrope``) does; v passes through."""
    positions, cache = torch.tensor([3, 4, 9, 10, 11]), _cache().to(torch.bfloat16)
    qkv = _x(TOKENS, (HEADS + 2 * KV_HEADS) * DIM)
    q, k, v = qkv.split([HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM], dim=-1)
    cos, sin = cache.index_select(0, positions).reshape(-1, 2, DIM // 2).repeat(1, 1, 2).chunk(2, dim=-2)
    cos, sin = cos.reshape(-1, 1, 1, DIM), sin.reshape(-1, 1, 1, DIM)
    got = split_qkv_rmsnorm_rope(qkv, sin, cos, HEADS * DIM, KV_HEADS * DIM, DIM, is_neox_style=True)
    want = npu_mrope(positions, q.contiguous(), k.contiguous(), cache, DIM, mrope_section=[0, 0, 0])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and torch.equal(got[2], v)


@pytest.mark.parametrize(
    ("call", "op", "arg"),
    [
        (lambda: npu_rms_norm(_x(4, 16).to(torch.int32), _x(16)), "npu_rms_norm", "self"),
        (lambda: npu_rms_norm(_x(4, 16), _x(8)), "npu_rms_norm", "gamma"),  # not x's trailing dims
        (lambda: npu_rms_norm(_x(4, 16), _x(16, dtype=torch.float32)), "npu_rms_norm", "gamma"),
        (lambda: npu_add_rms_norm(_x(4, 16), _x(3, 16), _x(16)), "npu_add_rms_norm", "x2"),
        (lambda: npu_swiglu(_x(4, 15)), "npu_swiglu", "dim"),  # odd: no two halves
        (lambda: npu_mrope(torch.tensor([0, 16]), _x(2, 32), _x(2, 16), _cache().bfloat16(), DIM), "npu_mrope",
         "positions"),  # past the cache
        (lambda: npu_mrope(torch.tensor([0, 1]), _x(2, 32), _x(2, 16), _cache(), DIM), "npu_mrope", "cos_sin_cache"),
        (lambda: split_qkv_rmsnorm_rope(_x(2, 96), _x(2, 12), _x(2, 12), 48, 24, 12), "split_qkv_rmsnorm_rope",
         "head_dim"),  # 12: not a power of two
    ],
)  # fmt: skip
def test_a_call_outside_the_contract_names_the_argument_and_page(call, op, arg):
    with pytest.raises(ContractViolation) as err:
        call()
    assert (err.value.op, err.value.arg, err.value.page) == (op, arg, PAGE[op])


def test_forms_the_twin_does_not_emulate_raise_not_emulated():
    with pytest.raises(NotEmulated, match="mrope mode"):
        npu_mrope(torch.zeros(3, 2, dtype=torch.long), _x(2, 32), _x(2, 16), _cache().bfloat16(), DIM)
    with pytest.raises(NotEmulated, match="norm"):
        split_qkv_rmsnorm_rope(_x(2, 64), _x(2, 8), _x(2, 8), 32, 16, DIM, eps=1e-6)

"""The compiled RMSNorm (``runtime_ext/ops/norm_cpu``) against SGLang's own ``RMSNorm.forward_native``
on bfloat16 rows, with and without a residual, both weight orders (``cast_x_before_out_mul``): the new
residual equal, the output as close to the float64 result as SGLang's own (torch sums the squares in
another order: a few last-bit roundings differ). Through
the hook (``decode_hooks.rmsnorm_cpu``) a layer with a variant the kernel does not take runs SGLang's."""

from __future__ import annotations

import pytest
import torch
from sglang.srt.layers.layernorm import RMSNorm

from runtime_ext import decode_hooks
from runtime_ext.ops import norm_cpu


def _norm(hidden: int, cast_before: bool = False, **kw) -> RMSNorm:
    norm = RMSNorm(hidden, eps=1e-5, cast_x_before_out_mul=cast_before, **kw).to(torch.bfloat16)
    norm.weight.data = torch.randn(hidden, generator=torch.Generator().manual_seed(hidden)).bfloat16()
    return norm


def test_the_compiled_loop_is_loaded_here():
    assert norm_cpu.status() == "native", norm_cpu.reason()


@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("hidden", [576, 1000])
@pytest.mark.parametrize("cast_before", [False, True])
@pytest.mark.parametrize("with_residual", [False, True])
def test_outputs_match_sglangs_forward_native(rows, hidden, cast_before, with_residual):
    gen = torch.Generator().manual_seed(rows + hidden)
    norm = _norm(hidden, cast_before)
    x = (torch.randn(rows, hidden, generator=gen) * 3).bfloat16()
    residual = torch.randn(rows, hidden, generator=gen).bfloat16() if with_residual else None
    before = norm_cpu.CALLS[0]
    got = norm_cpu.rmsnorm(x, residual, norm.weight.data, norm.variance_epsilon, cast_before)
    assert got is not None and norm_cpu.CALLS[0] == before + 1
    want = norm.forward_native(x, residual)
    out, want_out = got[0], want[0] if with_residual else want
    if with_residual:
        assert torch.equal(got[1], want[1])  # x + residual rounded once: the same
    s = x.double() + (residual.double() if with_residual else 0)
    exact = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon) * norm.weight.double()
    error = ((out.double() - exact).abs() / exact.abs().clamp_min(1e-30)).max().item()
    sglang_error = ((want_out.double() - exact).abs() / exact.abs().clamp_min(1e-30)).max().item()
    assert error <= max(sglang_error, 2**-8) * 1.01, (error, sglang_error)  # as close to exact as SGLang's
    assert (out != want_out).float().mean().item() < 0.02  # a few last-bit roundings, no more


def test_the_hook_takes_plain_layers_and_leaves_variants_to_sglang():
    x = torch.randn(2, 64).bfloat16()
    calls = []

    def original(norm, x, residual=None, post=None, **kw):
        calls.append(norm)
        return norm.forward_native(x, residual, post)

    plain, variant = _norm(64), _norm(64, fp32_residual=True)
    before = norm_cpu.CALLS[0]
    decode_hooks.rmsnorm_cpu(original, plain, x)
    assert norm_cpu.CALLS[0] == before + 1 and calls == []
    decode_hooks.rmsnorm_cpu(original, variant, x, x.clone())
    decode_hooks.rmsnorm_cpu(original, plain, x, x.clone(), x.clone())  # a post-residual addend
    decode_hooks.rmsnorm_cpu(original, plain, x.float())  # float32 rows
    assert calls == [variant, plain, plain] and norm_cpu.CALLS[0] == before + 1


def _rope(head_size: int, rotary_dim: int, neox: bool, cache_dtype=torch.bfloat16):
    """SGLang's RotaryEmbedding as its CPU platform builds it (a bf16 cos/sin cache, the plain
    rotation); built field by field: outside SGLang's CPU engine its __init__ takes the CUDA branch."""
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding
    from sglang.srt.layers.rotary_embedding.utils import apply_rotary_emb

    rope = RotaryEmbedding.__new__(RotaryEmbedding)
    torch.nn.Module.__init__(rope)
    rope.head_size, rope.rotary_dim, rope.max_position_embeddings = head_size, rotary_dim, 4096
    rope.base, rope.is_neox_style, rope.dtype, rope._force_native = 10000, neox, torch.bfloat16, False
    rope.position_start = 0
    rope.register_buffer("cos_sin_cache", rope._compute_cos_sin_cache().to(cache_dtype), persistent=False)
    rope._apply_rotary_emb_wrapped = apply_rotary_emb
    return rope


@pytest.mark.parametrize(("head_size", "rotary_dim"), [(64, 64), (128, 64)])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("tokens", [1, 5, 200])
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float32])  # CPU's; SGLANG_ROPE_CACHE_FP32's
def test_rope_equals_sglangs_forward_native_bit_for_bit(head_size, rotary_dim, neox, tokens, cache_dtype):
    rope = _rope(head_size, rotary_dim, neox, cache_dtype)
    gen = torch.Generator().manual_seed(tokens + head_size)
    qkv = (torch.randn(tokens, (9 + 3 + 3) * head_size, generator=gen) * 4).bfloat16()
    q, k = qkv[:, : 9 * head_size], qkv[:, 9 * head_size : 12 * head_size]  # views into qkv, as SGLang's
    positions = torch.randint(0, 4096, (tokens,), generator=gen)
    before = norm_cpu.CALLS[0]
    got = decode_hooks.rope_cpu(lambda *a: pytest.fail("SGLang's path ran"), rope, positions, q, k)
    assert norm_cpu.CALLS[0] == before + 1
    want = rope.forward_native(positions, q, k)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[0].shape == q.shape and got[1].shape == k.shape


def test_rope_variants_go_to_sglang():
    rope = _rope(64, 64, True)
    q, k = torch.randn(2, 128).bfloat16(), torch.randn(2, 64).bfloat16()
    positions = torch.tensor([1, 2])
    ran = []

    def original(*args):
        ran.append(args[4:])
        return args[0].forward_native(*args[1:])

    decode_hooks.rope_cpu(original, rope, positions, q, k, torch.tensor([3, 3]))  # offsets
    decode_hooks.rope_cpu(original, rope, positions, q.float(), k.float())  # float32 rows
    decode_hooks.rope_cpu(original, rope, positions.int(), q, k)  # int32 positions
    assert len(ran) == 3
    with pytest.raises(IndexError, match="outside the cos/sin cache"):
        decode_hooks.rope_cpu(original, rope, torch.tensor([1, 4096]), q, k)

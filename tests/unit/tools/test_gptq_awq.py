"""GPTQ and AWQ math (tools/quant/gptq.py, tools/quant/awq.py) on random tensors and a tiny
random Llama: GPTQ's error compensation beats round-to-nearest on the same inputs, and AWQ's
scale folding is an exact transform of the float model."""

from __future__ import annotations

import pytest
import torch

from runtime_ext.ops import quant_ref
from runtime_ext.quant.policy import QuantPolicy
from tools.quant import awq, gptq
from tools.quant import layers as L

N, K, GROUP = 96, 320, 64  # 5 groups; the ragged case is in test_gptq_output_is_our_layout


def inputs(k: int, t: int = 2048) -> torch.Tensor:
    """Correlated inputs with a few outlier channels, like a transformer's."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(t, k // 4, generator=g) @ torch.randn(k // 4, k, generator=g) / 4
    x[:, :: k // 8] *= 8
    return x + 0.1 * torch.randn(t, k, generator=g)


def rtn(w: torch.Tensor, _h: torch.Tensor, bits: int, group: int, **_: object) -> gptq.Quantized:
    q, scale = quant_ref.quantize_weight_groupwise(w, bits, group)
    return gptq.Quantized(quant_ref.unpack_int4(q) if bits == 4 else q, scale, torch.zeros_like(scale))


def output_error(quantizer, x: torch.Tensor, w: torch.Tensor, bits: int = 4, **kw) -> float:
    h = gptq.Hessian(w.shape[1])
    for piece in x.split(512):
        h.add(piece)
    q, scale, offset = quantizer(w, h.h, bits, GROUP, **kw)
    return float((x @ w.T - x @ gptq.dequantize(q, scale, GROUP, offset).T).pow(2).mean())


def assert_below(quantizer, x: torch.Tensor, w: torch.Tensor, than=rtn, factor: float = 0.8, **kw) -> None:
    base, err = output_error(than, x, w, **kw.pop("than_kw", {})), output_error(quantizer, x, w, **kw)
    assert err < factor * base, f"output MSE {err:.5f} vs {base:.5f}: not below {factor}×"


def assert_beats_rtn(quantizer, x: torch.Tensor, w: torch.Tensor, **kw) -> None:
    assert_below(quantizer, x, w, **kw)


@pytest.mark.parametrize("act_order, mse", [(False, False), (True, False), (True, True)])
def test_gptq_reduces_output_error_vs_rtn(act_order, mse):
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(1))
    assert_beats_rtn(gptq.gptq, inputs(K), w, act_order=act_order, mse=mse)


def test_the_assertion_fails_for_rtn_itself():
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(1))
    with pytest.raises(AssertionError, match="not below 0.8×"):
        assert_beats_rtn(rtn, inputs(K), w)


@pytest.mark.parametrize("bits", [4, 8])
def test_gptq_output_is_our_layout(bits):
    k = 288  # ragged last group (4.5 × 64), like SmolLM2's K = 576 at g128
    w = torch.randn(N, k)
    h = gptq.Hessian(k)
    h.add(inputs(k, 512))
    q, scale, offset = gptq.gptq(w, h.h, bits, GROUP, act_order=True)
    assert q.dtype == torch.int8 and q.shape == (N, k) and scale.shape == (N, 5) and scale.dtype == torch.float32
    assert int(q.min()) >= (-8 if bits == 4 else -127) and int(q.max()) <= quant_ref.QMAX[bits]
    assert not offset.any()  # symmetric unless asked
    layer = gptq.QuantizedLinear(gptq.Quantized(q, scale, offset), bits, GROUP)  # the serving math reads it back
    x = torch.randn(3, k)
    assert torch.allclose(layer(x), x @ gptq.dequantize(q, scale, GROUP).T, atol=1e-4)


def skewed(n: int, k: int) -> torch.Tensor:
    """Weights whose groups are off-centre (a shifted, one-sided part), where a zero point pays."""
    g = torch.Generator().manual_seed(2)
    shift = 1.5 * torch.rand(n, -(-k // GROUP), generator=g).repeat_interleave(GROUP, 1)[:, :k]
    return torch.randn(n, k, generator=g) + shift


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("act_order, mse", [(False, False), (True, True)])
def test_asymmetric_gptq_beats_symmetric_on_skewed_weights(bits, act_order, mse):
    kw = {"bits": bits, "act_order": act_order, "mse": mse}
    assert_below(gptq.gptq, inputs(K), skewed(N, K), than=gptq.gptq, factor=0.8, asym=True, than_kw=kw, **kw)


def test_the_asymmetric_assertion_fails_without_the_zero_point():
    kw = {"bits": 4, "act_order": True, "mse": True}
    with pytest.raises(AssertionError, match="not below 0.8×"):
        assert_below(gptq.gptq, inputs(K), skewed(N, K), than=gptq.gptq, factor=0.8, asym=False, than_kw=kw, **kw)


@pytest.mark.parametrize("bits", [4, 8])
def test_asymmetric_values_use_every_level_and_serve_as_stored(bits):
    k = 288
    h = gptq.Hessian(k)
    h.add(inputs(k, 512))
    q, scale, offset = gptq.gptq(skewed(N, k), h.h, bits, GROUP, act_order=True, mse=True, asym=True)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    assert int(q.min()) == low and int(q.max()) == high  # the whole signed range, -8 / -128 included
    assert bool((offset == offset.round()).all()) and offset.any()  # integral zero points, not all 0
    layer = gptq.QuantizedLinear(gptq.Quantized(q, scale, offset), bits, GROUP)
    x = torch.randn(3, k)
    want = x @ ((q.float() + offset.repeat_interleave(GROUP, 1)[:, :k]) * scale.repeat_interleave(GROUP, 1)[:, :k]).T
    assert torch.allclose(layer(x), want, atol=1e-4)


def tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, like SmolLM2
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # non-trivial norms, so folding into them is visible
        for layer in model.model.layers:
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
            layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    return model


@torch.no_grad()
def test_awq_scale_folding_leaves_the_float_model_unchanged():
    model = tiny_llama()
    ids = torch.randint(0, 128, (1, 64), generator=torch.Generator().manual_seed(2))
    before = model(ids).logits
    xs, kws = L.layer_inputs(model, [ids[0].tolist()])
    policy = QuantPolicy("w4a16", 32)
    alphas = []
    for layer in model.model.layers:
        alphas += list(awq.scale_layer(layer, xs, kws, policy, clip=False).values())
        xs = L.run_layer(layer, xs, kws)
    assert any(a > 0 for a in alphas), alphas  # some scale other than 1 was folded in
    assert (model(ids).logits - before).abs().max() <= 1e-5


def test_export_writes_msmodelslim_offsets():
    """msModelSlim reads a weight back as ``(q − weight_offset) · weight_scale``: what the export writes
    for an asymmetric layer must give the dequantized GPTQ weight that way (and 0 when symmetric)."""
    from tools.quant.export import quantized_tensors

    k = 256
    h = gptq.Hessian(k)
    h.add(inputs(k, 512))
    policy = QuantPolicy("w4a16", GROUP)
    for asym in (True, False):
        layer = gptq.gptq(skewed(N, k), h.h, 4, GROUP, asym=asym)
        out = quantized_tensors("L", torch.zeros(N, k), policy, given=layer)
        q, scale, stored = out["L.weight"], out["L.weight_scale"], out["L.weight_offset"]
        wide = lambda t: t.repeat_interleave(GROUP, 1)  # noqa: E731
        assert torch.equal((q.float() - wide(stored)) * wide(scale), gptq.dequantize(*layer[:2], GROUP, layer.offset))
        assert bool(stored.any()) == asym

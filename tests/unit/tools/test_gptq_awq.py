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


def rtn(w: torch.Tensor, _h: torch.Tensor, bits: int, group: int, **_: object) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = quant_ref.quantize_weight_groupwise(w, bits, group)
    return (quant_ref.unpack_int4(q) if bits == 4 else q), scale


def output_error(quantizer, x: torch.Tensor, w: torch.Tensor, bits: int = 4, **kw) -> float:
    h = gptq.Hessian(w.shape[1])
    for piece in x.split(512):
        h.add(piece)
    q, scale = quantizer(w, h.h, bits, GROUP, **kw)
    return float((x @ w.T - x @ gptq.dequantize(q, scale, GROUP).T).pow(2).mean())


def assert_beats_rtn(quantizer, x: torch.Tensor, w: torch.Tensor, **kw) -> None:
    base, err = output_error(rtn, x, w), output_error(quantizer, x, w, **kw)
    assert err < 0.8 * base, f"output MSE {err:.5f} vs RTN {base:.5f}: not below 0.8× RTN"


@pytest.mark.parametrize("act_order, mse", [(False, False), (True, False), (True, True)])
def test_gptq_reduces_output_error_vs_rtn(act_order, mse):
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(1))
    assert_beats_rtn(gptq.gptq, inputs(K), w, act_order=act_order, mse=mse)


def test_the_assertion_fails_for_rtn_itself():
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(1))
    with pytest.raises(AssertionError, match="not below 0.8× RTN"):
        assert_beats_rtn(rtn, inputs(K), w)


@pytest.mark.parametrize("bits", [4, 8])
def test_gptq_output_is_our_layout(bits):
    k = 288  # ragged last group (4.5 × 64), like SmolLM2's K = 576 at g128
    w = torch.randn(N, k)
    h = gptq.Hessian(k)
    h.add(inputs(k, 512))
    q, scale = gptq.gptq(w, h.h, bits, GROUP, act_order=True)
    assert q.dtype == torch.int8 and q.shape == (N, k) and scale.shape == (N, 5) and scale.dtype == torch.float32
    assert int(q.min()) >= (-8 if bits == 4 else -127) and int(q.max()) <= quant_ref.QMAX[bits]
    layer = gptq.QuantizedLinear(q, scale, bits, GROUP)  # the serving math reads it back
    x = torch.randn(3, k)
    assert torch.allclose(layer(x), x @ gptq.dequantize(q, scale, GROUP).T, atol=1e-4)


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

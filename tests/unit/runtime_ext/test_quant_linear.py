"""Quantized linear math vs a float64 reference (odd shapes included), the NPU path under the
emulated torch_npu ops, and the pure policy / sensitivity logic."""

from __future__ import annotations

import pytest
import torch

from runtime_ext.ops import get_op, quant_npu
from runtime_ext.ops import quant_ref as ref
from runtime_ext.quant import policy as qp
from runtime_ext.quant import sensitivity
from tests.unit.runtime_ext import npu_emulation

SHAPES = [
    (1, 64, 32),
    (7, 128, 48),
    (5, 256, 33),
    (3, 80, 17),
]  # (tokens M, in K, out N): odd M, N; K=80: a short last group


def data(m, k, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g, dtype=torch.float64)
    w = torch.randn(n, k, generator=g, dtype=torch.float64) * 0.05
    w[:, 3] *= 20  # an outlier input channel, as real checkpoints have
    return x, w


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_w8a8_dynamic_matches_float64_within_int8_error(m, k, n):
    x, w = data(m, k, n)
    q, scale = ref.quantize_weight_per_channel(w)
    assert q.dtype == torch.int8 and scale.shape == (n,)
    assert bool(
        (
            (ref.dequantize_weight_per_channel(q, scale, torch.float64) - w).abs()
            <= scale.double().unsqueeze(1) / 2 + 1e-9
        ).all()
    )
    wq_t, w_scale = ref.prepare_w8a8(q, scale)
    y = ref.w8a8_matmul(x.float(), wq_t, w_scale)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert rel(y, x @ w.T) < 0.05  # the outlier channel sets each row's scale: ~2-4 % here
    # exactly the integer product, rescaled
    xq, xs = ref.quantize_per_token(x.float())
    exact = (xq.double() @ q.double().T) * xs.double().unsqueeze(1) * scale.double()
    assert torch.allclose(y.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits,bound", [(8, 0.03), (4, 0.2)])  # groups of 32 confine the outlier
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_weight_only_group_wise_matches_float64(bits, bound, m, k, n):
    x, w = data(m, k, n)
    q, scale = ref.quantize_weight_groupwise(w, bits, 32)
    assert scale.shape == (n, -(-k // 32))
    assert q.shape == ((n, k // 2) if bits == 4 else (n, k))  # INT4 packed two per byte
    deq = ref.dequantize_weight_groupwise(q, scale, bits, 32, torch.float64)
    step = scale.double().repeat_interleave(32, dim=1)[:, :k]
    assert bool(((deq - w).abs() <= step / 2 + 1e-9).all())
    y = ref.weight_only_matmul(x.float(), ref.prepare_weight_only(q, scale, bits, 32))
    assert rel(y, x @ w.T) < bound


def test_bad_weights_and_group_sizes_are_rejected():
    with pytest.raises(ValueError, match="even in_features"):
        ref.quantize_weight_groupwise(torch.ones(4, 97), 4, 64)
    with pytest.raises(ValueError, match="NaN or inf"):
        ref.quantize_weight_per_channel(torch.tensor([[1.0, float("inf")]]))
    zeros, scale = ref.quantize_weight_per_channel(torch.zeros(3, 8))
    assert torch.equal(zeros, torch.zeros(3, 8, dtype=torch.int8)) and torch.equal(scale, torch.zeros(3))


@pytest.fixture
def emulated_npu(monkeypatch):
    monkeypatch.setattr(quant_npu, "_npu", lambda: npu_emulation)


@pytest.mark.parametrize("m,k,n", [(3, 64, 40), (1, 128, 16)])
def test_npu_path_matches_the_reference_under_the_emulated_ops(emulated_npu, m, k, n):
    x, w = data(m, k, n)
    x = x.to(torch.bfloat16)
    q, scale = ref.quantize_weight_per_channel(w)
    y_npu = get_op("w8a8_matmul", "npu")(x, *get_op("w8a8_prepare", "npu")(q, scale))
    y_ref = get_op("w8a8_matmul", "cpu")(x, *get_op("w8a8_prepare", "cpu")(q, scale))
    assert y_npu.dtype == torch.bfloat16 and rel(y_npu, y_ref) < 1e-2
    for bits in (8, 4):
        qg, sg = ref.quantize_weight_groupwise(w, bits, 32)
        y_npu = get_op("weight_only_matmul", "npu")(x, get_op("weight_only_prepare", "npu")(qg, sg, bits, 32))
        y_ref = get_op("weight_only_matmul", "cpu")(x, get_op("weight_only_prepare", "cpu")(qg, sg, bits, 32))
        assert rel(y_npu, y_ref) < 1e-2, bits


def test_policy_fused_modules_share_one_scheme_and_unknown_names_fail():
    policy = qp.QuantPolicy("w8a8_dynamic", keep=("model.layers.2.self_attn.k_proj",))
    assert qp.keeps_high_precision("model.layers.2.self_attn.qkv_proj", policy)
    assert not qp.keeps_high_precision("model.layers.2.self_attn.o_proj", policy)
    assert not qp.keeps_high_precision("model.layers.3.self_attn.qkv_proj", policy)
    assert qp.QuantPolicy.from_json(policy.to_json()) == policy
    names = qp.linear_layer_names(
        [
            "model.layers.0.mlp.down_proj.weight",
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.norm.weight",
        ]
    )
    assert names == {"model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"}
    with pytest.raises(qp.QuantPolicyError, match="model.layers.0.mlp.dwn_proj"):
        qp.check_keep(["model.layers.0.mlp.dwn_proj"], names)
    with pytest.raises(qp.QuantPolicyError, match="group size 100"):
        qp.QuantPolicy("w4a16", group_size=100)
    with pytest.raises(qp.QuantPolicyError, match="valid: none, w8a8_dynamic"):
        qp.QuantPolicy("int3")


def test_sensitivity_rules_and_file(tmp_path):
    scores = {
        "a": {"kl": 0.001, "dispersion": 5, "energy": 0.1},
        "b": {"kl": 0.002, "dispersion": 60, "energy": 0.1},
        "c": {"kl": 0.06, "dispersion": 5, "energy": 0.1},
        "d": {"kl": 0.0001, "dispersion": 5, "energy": 0.5},
    }
    assert list(sensitivity.select(scores, kl_top=0)) == ["c", "b", "d"]
    assert list(sensitivity.select({k: v for k, v in scores.items() if k == "a"})) == ["a"]  # top-KL floor
    assert sensitivity.dispersion([0.0, 1.0, 2.0, 3.0, 100.0]) == pytest.approx(100 / 2)
    path = tmp_path / "s.json"
    sensitivity.write(path, "m", "w8a8_dynamic", scores, {"c": "KL"}, sensitivity.THRESHOLDS)
    assert sensitivity.load_sensitive_layers(path) == ["c"]
    path.write_text("{}")
    with pytest.raises(sensitivity.SensitiveLayersError, match="quant scan"):
        sensitivity.load_sensitive_layers(path)


def asymmetric(k, n, bits, seed=3):
    """Stored values over the whole signed range, integral offsets and scales per group of 32."""
    g = torch.Generator().manual_seed(seed)
    low = -(2 ** (bits - 1))
    q = torch.randint(low, -low, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, -(-k // 32), generator=g) * 0.01 + 0.001
    offset = torch.randint(low + 1, -low + 1, scale.shape, generator=g).float()
    return q, scale, offset


@pytest.mark.parametrize("bits", [8, 4])
def test_weight_only_offset_is_added_before_the_scale(bits):
    q, scale, offset = asymmetric(80, 17, bits)  # K = 80: a short last group
    stored = ref.pack_int4(q) if bits == 4 else q
    want = (q.double() + offset.double().repeat_interleave(32, 1)[:, :80]) * scale.double().repeat_interleave(32, 1)[
        :, :80
    ]
    deq = ref.dequantize_weight_groupwise(stored, scale, bits, 32, torch.float64, offset)
    assert torch.allclose(deq, want, rtol=1e-6)
    x = torch.randn(3, 80)
    y = ref.weight_only_matmul(x, ref.prepare_weight_only(stored, scale, bits, 32, offset))
    assert rel(y, x.double() @ want.T) < 1e-5
    symmetric = ref.weight_only_matmul(x, ref.prepare_weight_only(stored, scale, bits, 32))
    assert rel(symmetric, x.double() @ want.T) > 0.1  # the offset is not a rounding detail


def test_offsets_are_kept_compact():
    assert ref.compact_offset(None) is None and ref.compact_offset(torch.zeros(4, 2)) is None
    assert ref.compact_offset(torch.tensor([[-8.0, 8.0]])).dtype == torch.int8  # zero points: 1 byte per group
    assert ref.compact_offset(torch.tensor([[0.5, 1.0]])).dtype == torch.float32  # foreign float offsets kept
    with pytest.raises(ValueError, match="NaN or inf"):
        ref.compact_offset(torch.tensor([[float("nan")]]))


@pytest.mark.parametrize("bits", [8, 4])
def test_npu_path_passes_the_offset_as_antiquant_offset(emulated_npu, bits):
    q, scale, offset = asymmetric(128, 16, bits)
    stored = ref.pack_int4(q) if bits == 4 else q
    x = torch.randn(3, 128).to(torch.bfloat16)
    y_npu = get_op("weight_only_matmul", "npu")(
        x, get_op("weight_only_prepare", "npu")(stored, scale, bits, 32, offset)
    )
    y_ref = get_op("weight_only_matmul", "cpu")(
        x, get_op("weight_only_prepare", "cpu")(stored, scale, bits, 32, offset)
    )
    assert rel(y_npu, y_ref) < 1e-2
    y_sym = get_op("weight_only_matmul", "cpu")(x, get_op("weight_only_prepare", "cpu")(stored, scale, bits, 32))
    assert rel(y_sym, y_ref) > 0.1  # so the comparison above sees the offset

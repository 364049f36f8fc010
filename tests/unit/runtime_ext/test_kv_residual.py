"""The C8-S INT4 residual side buffer (exact expectations), the C8-S+R method's store and read
paths (what attention reads is deq8 + deq4), and KV sizing."""

from __future__ import annotations

import pytest
import torch

from runtime_ext.kv_cache import sizing
from runtime_ext.kv_cache.calibration import Calibration
from runtime_ext.kv_cache.residual import ResidualSlots
from runtime_ext.ops import kv_ref as ref

H, D = 2, 8


def static_deq(x, scale):
    return ref.dequantize_static(ref.quantize_static(x, scale), scale, torch.float32)


def outlier_batch(t=6):
    """Rows 1 and 4 (head 0) carry one channel 40x out of the calibrated range: big INT8 error."""
    x = torch.linspace(-1, 1, t * H * D).reshape(t, H, D)
    x[1, 0, 3] = 40.0
    x[4, 0, 5] = -40.0
    return x


SCALE = torch.full((H, D), 1.0 / 127)


def test_outliers_get_residual_slots_and_reads_close_the_error():
    x = outlier_batch()
    deq8 = static_deq(x, SCALE)
    slots = ResidualSlots(capacity=4, heads=H, head_dim=D, tau=0.05, device="cpu")
    locs = torch.tensor([10, 11, 12, 13, 14, 15])
    slots.store(locs, x, deq8)
    assert (slots.seen, slots.outliers, slots.dropped, slots.used) == (12, 2, 0, 2)
    assert slots.keys.tolist() == [11 * H + 0, 14 * H + 0]  # sorted loc*H + head
    out = slots.apply(locs, deq8.clone())
    before = ref.relative_error(x, deq8)
    after = ref.relative_error(x, out)
    assert after[1, 0] < before[1, 0] / 5 and after[4, 0] < before[4, 0] / 5
    untouched = torch.ones(6, H, dtype=torch.bool)
    untouched[1, 0] = untouched[4, 0] = False
    assert torch.equal(out[untouched], deq8[untouched])  # vectors without a slot read exactly deq8


def test_apply_follows_the_locations_in_any_order_and_with_repeats():
    x = outlier_batch()
    deq8 = static_deq(x, SCALE)
    slots = ResidualSlots(4, H, D, 0.05, "cpu")
    slots.store(torch.arange(6), x, deq8)
    full = slots.apply(torch.arange(6), deq8.clone())
    picked = slots.apply(torch.tensor([4, 0, 4, 1]), deq8[[4, 0, 4, 1]].clone())
    assert torch.equal(picked, full[[4, 0, 4, 1]])


def test_release_and_rewrite_free_slots_so_reused_pages_read_no_stale_residual():
    x = outlier_batch()
    slots = ResidualSlots(2, H, D, 0.05, "cpu")
    slots.store(torch.arange(6), x, static_deq(x, SCALE))
    assert slots.used == 2 and slots.free.numel() == 0
    slots.release(torch.tensor([4, 5, 99]))
    assert slots.used == 1 and slots.free.numel() == 1 and slots.keys.tolist() == [1 * H]
    calm = torch.zeros(6, H, D)  # location 1 rewritten with a vector that needs no residual
    slots.store(torch.arange(6), calm, static_deq(calm, SCALE))
    assert slots.used == 0 and slots.free.numel() == 2
    assert torch.equal(slots.apply(torch.arange(6), torch.zeros(6, H, D)), torch.zeros(6, H, D))
    slots.store(torch.arange(6), x, static_deq(x, SCALE))
    slots.clear()
    assert slots.used == 0 and sorted(slots.free.tolist()) == [0, 1]


def test_a_full_side_buffer_drops_residuals_and_counts_them():
    x = outlier_batch()
    slots = ResidualSlots(1, H, D, 0.05, "cpu")
    slots.store(torch.arange(6), x, static_deq(x, SCALE))
    assert (slots.outliers, slots.dropped, slots.used) == (2, 1, 1)


@pytest.fixture
def residual_method(tmp_path, monkeypatch):
    return make_residual_method(tmp_path, monkeypatch, "none")


def make_residual_method(tmp_path, monkeypatch, rotation):
    """The real ``c8_static_residual`` method with one layer's pool of 16 tokens, calibrated to
    ``SCALE`` (range ±1, in the ``rotation``'s space) with τ = 0.05."""
    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.kv_cache.methods import C8StaticResidualKVCacheMethod

    scale = SCALE.tolist()
    calib = Calibration(
        model="test",
        layers=1,
        kv_heads=H,
        head_dim=D,
        k_scale=[scale],
        v_scale=[scale],
        tau=0.05,
        eps_mean=0.01,
        eps_p99=0.04,
        outlier_rate=0.1,
        tokens=64,
        rotation=rotation,
    )
    calib.save(tmp_path / "kv.json")
    for name, value in RuntimeExtConfig(kv_calibration=tmp_path / "kv.json", kv_rotation=rotation).to_env().items():
        monkeypatch.setenv(name, value)
    method = C8StaticResidualKVCacheMethod(torch.float32)
    bufs = method.create_buffers(size=16, head_num=H, head_dim=D, layer_num=1, device="cpu")
    return method, {name: bufs[name][0] for name in ("k_buffer", "v_buffer", "k_scale_buffer", "v_scale_buffer")}


def test_the_method_reads_deq8_plus_deq4_for_stored_outliers(residual_method):
    """Through the method's own store and both reads (``gather``: runtime_ext attention;
    ``dequantize_kv_tensor``: SGLang's whole-buffer read): an outlier vector reads back as
    deq8 + deq4 (strictly closer to the original than plain C8-S), every other one as deq8."""
    method, pool = residual_method
    x = outlier_batch()
    locs = torch.tensor([9, 3, 12, 4, 7, 0])
    k, v, ks, vs = pool["k_buffer"], pool["v_buffer"], pool["k_scale_buffer"], pool["v_scale_buffer"]
    method.quantize_and_store(k, v, ks, vs, locs, x, -x.flip(0))
    for buf, scale, original in ((k, ks, x), (v, vs, -x.flip(0))):
        deq8 = static_deq(original, SCALE)
        outlier = ref.relative_error(original, deq8) > 0.05
        assert int(outlier.sum()) == 2
        packed, r_scale = ref.quantize_residual(original - deq8)
        deq4 = ref.dequantize_residual(packed, r_scale.half().float())  # slots keep the scale in float16
        expected = torch.where(outlier.unsqueeze(-1), deq8 + deq4, deq8)
        for read in (method.gather(buf, scale, locs), method.dequantize_kv_tensor(buf, scale, 0)[locs]):
            err, plain = ref.relative_error(original, read), ref.relative_error(original, deq8)
            assert (err[outlier] < plain[outlier] / 5).all() and torch.equal(err[~outlier], plain[~outlier])
            assert torch.allclose(read, expected, rtol=0, atol=1e-6)


def test_a_rotated_method_stores_rotated_rows_and_reads_back_the_original(tmp_path, monkeypatch):
    """kv_rotation kv: ``gather`` returns the rows as stored (rotated: deq8 + deq4 of ``x·H``), the
    whole-buffer read rotates them back; both K and V; a calibration of another rotation is refused."""
    from runtime_ext.kv_cache.calibration import CalibrationMismatchError

    method, pool = make_residual_method(tmp_path, monkeypatch, "kv")
    h = ref.hadamard(D)
    x = outlier_batch()
    locs = torch.tensor([9, 3, 12, 4, 7, 0])
    k, v, ks, vs = pool["k_buffer"], pool["v_buffer"], pool["k_scale_buffer"], pool["v_scale_buffer"]
    method.quantize_and_store(k, v, ks, vs, locs, x, -x.flip(0))
    for buf, scale, original in ((k, ks, x), (v, vs, -x.flip(0))):
        rotated = ref.rotate(original, h)
        stored = method.gather(buf, scale, locs)
        assert ref.relative_error(rotated, stored).max() < 0.05  # deq8 (+ deq4) of the rotated rows
        back = method.dequantize_kv_tensor(buf, scale, 0)[locs]
        assert torch.allclose(back, ref.rotate(stored, h), atol=1e-6)
        assert ref.relative_error(original, back).max() < 0.05
    with pytest.raises(CalibrationMismatchError, match="kv_rotation=kv"):
        make_residual_method(tmp_path, monkeypatch, "none")[0].__class__(torch.float32, "kv").create_buffers(
            size=16, head_num=H, head_dim=D, layer_num=1, device="cpu"
        )


def test_cell_sizes_and_budget():
    bf16 = sizing.cell_bytes("bf16", 30, 3, 64)
    assert bf16 == 23040
    assert sizing.cell_bytes("c8_dynamic", 30, 3, 64) == 11880
    assert sizing.cell_bytes("c8_static", 30, 3, 64) == 11520
    # residual share: 3 heads * 1% * 6 (headroom) * (32 + 14) bytes per layer side, 60 sides
    assert sizing.cell_bytes("c8_static_residual", 30, 3, 64, 0.01) == 11520 + 497
    for mode in ("c8_dynamic", "c8_static", "c8_static_residual"):
        assert bf16 / sizing.cell_bytes(mode, 30, 3, 64, 0.0076) >= 1.9
    assert sizing.tokens_for_budget(1 << 30, bf16, 16) == 46592
    with pytest.raises(ValueError, match="holds no page"):
        sizing.tokens_for_budget(1000, bf16, 16)
    with pytest.raises(ValueError, match="valid: bf16"):
        sizing.cell_bytes("int3", 1, 1, 1)

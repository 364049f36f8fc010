"""Batched decode attention (``runtime_ext/attention/batched.py``) equals the per-request reference
loop of the same backend, in float32, on a real SGLang ``MHATokenToKVPool``: mixed lengths (1 to
150 rows), two requests that share a prefix's cache rows (a prefix-cache hit), GQA (3 query heads
per KV head), the unquantized cache and every C8 method (rotated and not, the residual side
buffer included)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc, MHATokenToKVPool

from runtime_ext.attention import batched, native
from runtime_ext.attention.native import StructserveNativeAttnBackend
from runtime_ext.config import RuntimeExtConfig
from runtime_ext.kv_cache.calibration import Calibration
from runtime_ext.ops import attention_cpu
from tests import cpu_flags

HKV, G, D, LAYERS, SIZE = 2, 3, 64, 2, 1024
RIDS = [f"request-{i}" for i in range(6)]
LENS = [1, 150, 37, 5, 96, 120]  # request 5 shares request 4's first 80 rows (a prefix hit)


def _method(kind: str, rotation: str, tmp_path, monkeypatch):
    from runtime_ext.kv_cache import methods

    if kind == "bf16":
        return None
    if kind != "c8_dynamic":
        scale = [[[0.02] * D] * HKV] * LAYERS  # range ±2.5: the outlier rows clamp and leave residuals
        calib = Calibration("test", LAYERS, HKV, D, scale, scale, 0.02, 0.01, 0.04, 0.2, 64, rotation=rotation)
        calib.save(tmp_path / "kv.json")
    env = RuntimeExtConfig(kv_calibration=tmp_path / "kv.json", kv_rotation=rotation).to_env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cls = {m.name: m for m in methods.METHODS}[kind]
    return cls(torch.float32)


def _filled_backend(method, seed: int = 0):
    """A backend over a pool holding LENS rows per request (random K/V with a few outlier
    channels), and the forward batch of one decode step."""
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.int8 if method is not None else torch.float32
    pool = MHATokenToKVPool(SIZE, 1, dtype, HKV, D, LAYERS, "cpu", False, quant_method=method)
    req_to_token = torch.zeros((8, 256), dtype=torch.int32)
    free = torch.randperm(SIZE - 1, generator=gen) + 1  # location 0 is SGLang's padding slot
    taken = 0
    for row, n in enumerate(LENS):
        req_to_token[row, :n] = free[taken : taken + n]
        taken += n
    req_to_token[5, :80] = req_to_token[4, :80]
    for layer in _layers():
        locs = torch.unique(req_to_token[: len(LENS)][req_to_token[: len(LENS)] > 0]).long()
        k, v = (torch.randn(len(locs), HKV, D, generator=gen) for _ in range(2))
        k[:, :, :2] *= 20  # keys with outlier channels, as real ones have
        pool.set_kv_buffer(layer, KVWriteLoc(locs, None), k, v)
    backend = StructserveNativeAttnBackend.__new__(StructserveNativeAttnBackend)
    backend.req_to_token_pool = SimpleNamespace(req_to_token=req_to_token)
    backend.token_to_kv_pool, backend.swa_out_cache_loc = pool, None
    rows = torch.tensor([0, 3, 1, 4, 5, 2])  # not in row order
    lens = torch.tensor([LENS[r] for r in rows.tolist()])
    forward = SimpleNamespace(req_pool_indices=rows, seq_lens=lens, seq_lens_cpu=lens, encoder_lens=None)
    return backend, forward


def _layers():
    return [
        SimpleNamespace(
            layer_id=i,
            tp_q_head_num=HKV * G,
            tp_k_head_num=HKV,
            qk_head_dim=D,
            v_head_dim=D,
            scaling=D**-0.5,
            is_cross_attention=False,
            attn_type=AttentionType.DECODER,
            sliding_window_size=-1,
        )
        for i in range(LAYERS)
    ]


def _decode(backend, forward, batched_decode: bool, q: torch.Tensor) -> list[torch.Tensor]:
    backend.batched_decode = batched_decode
    return [backend.forward_decode(q, None, None, layer, forward, save_kv_cache=False) for layer in _layers()]


@pytest.mark.parametrize(
    ("kind", "rotation"),
    [
        ("bf16", "none"),
        ("c8_dynamic", "none"),
        ("c8_dynamic", "kv"),
        ("c8_static", "none"),
        ("c8_static", "k"),
        ("c8_static_residual", "none"),
        ("c8_static_residual", "kv"),
    ],
)
def test_batched_decode_equals_the_per_request_loop(kind, rotation, tmp_path, monkeypatch):
    backend, forward = _filled_backend(_method(kind, rotation, tmp_path, monkeypatch))
    if kind == "c8_static_residual":
        assert backend.token_to_kv_pool.quant_method.stats()["slots_used"] > 0  # the side buffer is read
    q = torch.randn(len(LENS), HKV * G * D, generator=torch.Generator().manual_seed(1))
    reference, fast = _decode(backend, forward, False, q), _decode(backend, forward, True, q)
    for want, got in zip(reference, fast):
        assert got.shape == want.shape == (len(LENS), HKV * G * D)
        assert torch.allclose(got, want, rtol=0, atol=1e-5), float((got - want).abs().max())
    assert not torch.allclose(reference[0], reference[1], atol=1e-3)  # the layers hold different rows


def test_the_rows_are_built_once_per_forward(tmp_path, monkeypatch):
    """Every layer of a forward reuses the first layer's ``DecodeRows``; the next forward builds new ones."""
    backend, forward = _filled_backend(None)
    built = []
    real = batched.DecodeRows.of
    monkeypatch.setattr(
        "runtime_ext.attention.native.DecodeRows.of", lambda *a: built.append(1) or real(*a), raising=True
    )
    q = torch.randn(len(LENS), HKV * G * D)
    _decode(backend, forward, True, q)
    _decode(backend, SimpleNamespace(**vars(forward)), True, q)
    assert len(built) == 2


def test_padding_never_reaches_the_output():
    """A request's output is the same whatever the padding rows hold (they point at location 0)."""
    gen = torch.Generator().manual_seed(2)
    req_to_token = torch.tensor([[5, 6, 7, 9], [3, 8, 0, 0]], dtype=torch.int32)
    rows = batched.DecodeRows.of(req_to_token, torch.tensor([1, 0]), [2, 4])
    assert rows.locs.tolist() == [[3, 8, 0, 0], [5, 6, 7, 9]] and rows.valid.sum(1).tolist() == [2, 4]
    k, v, q = torch.randn(10, HKV, D, generator=gen), torch.randn(10, HKV, D, generator=gen), torch.randn(2, HKV * G, D)
    out = batched.attend(q, k[rows.locs], v[rows.locs], rows.valid, D**-0.5)
    k[0], v[0] = 1e4, -1e4  # what the padding rows read
    assert torch.equal(batched.attend(q, k[rows.locs], v[rows.locs], rows.valid, D**-0.5), out)


def _extend(backend, forward, batched_decode: bool, q: torch.Tensor) -> list[torch.Tensor]:
    backend.batched_decode = batched_decode
    forward.extend_seq_lens = forward.extend_prefix_lens = None  # the host lists (``*_cpu``) are read
    return [backend.forward_extend(q, None, None, layer, forward, save_kv_cache=False) for layer in _layers()]


@pytest.mark.parametrize(("kind", "rotation"), [("bf16", "none"), ("c8_dynamic", "kv"), ("c8_static_residual", "none")])
def test_short_extends_as_decode_rows_equal_the_per_request_loop(kind, rotation, tmp_path, monkeypatch):
    """An extend batch (a mixed step: running decodes of one token, a forced span, prefills) gives
    what the per-request loop gives: requests of at most SHORT_EXTEND new output tokens run as
    decode rows (a token against its request's rows up to itself), longer ones one at a time."""
    backend, forward = _filled_backend(_method(kind, rotation, tmp_path, monkeypatch))
    new = [1, 5, 40, 1, 16, 17]  # rows 0 3 1 4 5 2 hold 1 5 150 96 120 37 tokens: the last `new` are new
    assert sorted(n <= native.SHORT_EXTEND for n in new) == [False, False, True, True, True, True]
    prefix = [int(n_all) - n for n_all, n in zip(forward.seq_lens.tolist(), new)]
    extend = SimpleNamespace(**vars(forward), extend_seq_lens_cpu=new, extend_prefix_lens_cpu=prefix, rids=RIDS)
    monkeypatch.setattr(native, "_MARKED", (tuple(RIDS), [True] * len(new)))  # all outputs (``mark_outputs``)
    q = torch.randn(sum(new), HKV * G * D, generator=torch.Generator().manual_seed(3))
    reference, fast = _extend(backend, extend, False, q), _extend(backend, extend, True, q)
    for want, got in zip(reference, fast):
        assert got.shape == want.shape == (sum(new), HKV * G * D)
        assert torch.allclose(got, want, rtol=0, atol=1e-5), float((got - want).abs().max())


@pytest.mark.skipif(not cpu_flags.has("avx512f"), reason="this CPU lacks AVX-512: the compiled attention is not built")
def test_short_extends_of_outputs_run_the_compiled_decode_over_a_bf16_pool_and_prompts_do_not(monkeypatch):
    """Over a bf16 pool the short requests of output tokens go through the compiled decode
    attention, within bf16 rounding of the per-request SDPA; a short prompt extend (a prefix-cache
    hit) never does, so a prompt computes alike with and without the cache."""
    assert attention_cpu.status() == "native", attention_cpu.reason()
    backend, forward = _filled_backend(None)
    pool = backend.token_to_kv_pool
    for layer in range(LAYERS):
        pool.k_buffer[layer], pool.v_buffer[layer] = pool.k_buffer[layer].bfloat16(), pool.v_buffer[layer].bfloat16()
    pool.dtype = pool.store_dtype = torch.bfloat16
    new = [1, 1, 1, 1, 3, 2]
    prefix = [int(n_all) - n for n_all, n in zip(forward.seq_lens.tolist(), new)]
    extend = SimpleNamespace(**vars(forward), extend_seq_lens_cpu=new, extend_prefix_lens_cpu=prefix, rids=RIDS)
    q = torch.randn(sum(new), HKV * G * D, generator=torch.Generator().manual_seed(4)).bfloat16()
    reference = _extend(backend, extend, False, q)
    before = attention_cpu.CALLS[0]
    assert all(torch.equal(a, b) for a, b in zip(_extend(backend, extend, True, q), reference))  # prompts
    assert attention_cpu.CALLS[0] == before
    monkeypatch.setattr(native, "_MARKED", (tuple(RIDS), [True, True, False, True, True, True]))
    fast = _extend(backend, SimpleNamespace(**vars(extend)), True, q)  # the next forward
    assert attention_cpu.CALLS[0] == before + LAYERS
    for want, got in zip(reference, fast):
        assert (got.float() - want.float()).abs().max().item() <= 2**-7 * want.float().abs().max().item() + 1e-3


def test_mark_outputs_flags_the_requests_whose_cached_prefix_covers_the_prompt(monkeypatch):
    monkeypatch.setattr(native, "_MARKED", None)
    reqs = [SimpleNamespace(origin_input_ids=[0] * n) for n in (10, 10, 7, 30)]
    extend = SimpleNamespace(is_extend=lambda: True)
    forward = SimpleNamespace(forward_mode=extend, extend_prefix_lens_cpu=[10, 9, 0, 31], rids=list("abcd"))
    assert native.mark_outputs(forward, None, SimpleNamespace(reqs=reqs)) is forward
    assert native._MARKED == (tuple("abcd"), [True, False, False, True])
    decode = SimpleNamespace(
        forward_mode=SimpleNamespace(is_extend=lambda: False), extend_prefix_lens_cpu=None, rids=["e"]
    )
    native.mark_outputs(decode, None, SimpleNamespace(reqs=reqs[:1]))
    assert native._MARKED == (tuple("abcd"), [True, False, False, True])


def test_a_refilled_forward_batch_gets_a_new_plan(monkeypatch):
    """A runner that refills one forward-batch object for the next forward gets that forward's
    rows, not the last one's (the plan is keyed by the lengths and request ids too)."""
    backend, forward = _filled_backend(None)
    extend = SimpleNamespace(**vars(forward), rids=RIDS)
    runs = []
    for new in ([1, 5, 40, 1, 16, 17], [1, 1, 1, 1, 1, 1]):  # two forwards through one object
        extend.extend_seq_lens_cpu = new
        extend.extend_prefix_lens_cpu = [int(n_all) - n for n_all, n in zip(forward.seq_lens.tolist(), new)]
        monkeypatch.setattr(native, "_MARKED", (tuple(RIDS), [True] * len(new)))
        q = torch.randn(sum(new), HKV * G * D, generator=torch.Generator().manual_seed(5))
        runs.append((SimpleNamespace(**vars(extend)), q, _extend(backend, extend, True, q)))
    for filled, q, fast in runs:
        want = _extend(backend, filled, False, q)
        assert all(torch.allclose(a, b, rtol=0, atol=1e-5) for a, b in zip(fast, want))

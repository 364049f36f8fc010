"""The C8 KV cache through SGLang 0.5.23's own NPU path, under the torch_npu twin (started by
``test_under_twin.py``; docs/npu-twin.md).

For ``engine.device: npu`` and each ``kv_cache`` mode, SGLang resolves the ``ascend`` backend and its
``KVCacheConfigurator`` builds the NPU pool, which for a C8 mode is runtime_ext's
``C8NPUMHATokenToKVPool`` holding runtime_ext's method. Then the ``ascend`` backend's own MHA
``forward_extend`` (``_npu_flash_attention_qlens``, a prefix read from the cache) and
``forward_decode`` (``_npu_paged_attention``) run over that pool, storing through the pool and
reading through it; their outputs equal causal attention over the CPU reference read of the same
K/V (``c8_reference.py``, from ``kv_ref``) within bf16 tolerance. The twin's attention ops refuse an
int8 cache (their binding has no dequant inputs): a raw int8 read fails their contract.

Host syncs: the twin counts device->host syncs on "npu" tensors inside each decode forward
(store + read + kernel); C8-D and C8-S make none.
"""

from __future__ import annotations

import os
import types
from collections import Counter
from functools import cache

import pytest
import torch

from tests.npu_twin import twin

twin.require()

from runtime_ext.kv_cache import support  # noqa: E402
from runtime_ext.kv_cache.sizing import KV_MODES  # noqa: E402
from runtime_ext.plugin import _STATE  # noqa: E402
from tests.npu_twin import c8_reference as ref  # noqa: E402
from tests.npu_twin.sglang_npu import (  # noqa: E402
    attention_backend,
    build_pools,
    engine_options,
    resolved,
    resolved_args,
    write_model,
)

SERVED_ON_NPU = support.SERVED["npu"]
PAGE = 128  # the PREFIX_ENCODER kernel's block size (attention_ops.py); SGLang's NPU default page size
SYNC_FREE = ("c8_dynamic", "c8_static")
# (request pool index, prefix tokens taken from request 0, new tokens, first page of the new tokens)
EXTEND_1 = [(0, 0, 130, 1), (1, 0, 5, 3)]
EXTEND_2 = [(2, 128, 3, 4)]  # reads request 0's first page from the cache (a radix-cache hit)


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded(tmp_path_factory):
    from sglang.srt.plugins import load_plugins

    load_plugins()
    assert os.getpid() in _STATE.registered_pids
    samples = [ref.kv_values(140, seed) for seed in range(2 * 4 * ref.LAYERS)]
    calibration = ref.write_calibration(tmp_path_factory.mktemp("calib") / "kv.json", samples)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STRUCTSERVE_KV_CALIBRATION", str(calibration))
        # C8-S + residual's pool runs here eagerly (no graph capture); a served build refuses it
        env.setitem(support.SERVED, "npu", tuple(KV_MODES))
        yield


@cache
def serve(mode: str) -> types.SimpleNamespace:
    """Build SGLang's NPU objects for ``mode`` and run two extends and one decode through them."""
    model = write_model(ref.Path(os.environ["STRUCTSERVE_KV_CALIBRATION"]).parent / "model")
    args = resolved_args(engine_options(model, kv_cache=mode, page_size=PAGE, max_total_tokens=1024))
    configurator, pools = build_pools(args)
    run = Run(args, configurator, pools, mode)
    run.step(EXTEND_1, decode=False, seed=10)
    run.step(EXTEND_2, decode=False, seed=20)
    run.step([(0, 0, 1, 0), (1, 0, 1, 0), (2, 0, 1, 0)], decode=True, seed=30)
    return types.SimpleNamespace(args=args, pools=pools, backend=run.backend, run=run, method=_STATE.kv_cache.built)


class Run:
    """Requests in the pool, their K/V as given, and each step's outputs against the reference."""

    def __init__(self, args, configurator, pools, mode: str) -> None:
        self.backend = attention_backend(args, configurator, pools)
        self.pools, self.mode = pools, mode
        self.locs: dict[int, list[int]] = {}
        self.kv: dict[tuple[int, int], list[torch.Tensor]] = {}  # (request, layer) -> [k, v] as given
        self.errors: list[float] = []
        self.syncs: list[str] = []
        self.kernels: set[str] = set()  # the torch_npu ops the decode step called
        calib = _calibration(mode)
        self.scales = None if calib is None else [torch.tensor(calib.k_scale[0]), torch.tensor(calib.v_scale[0])]

    def _batch(self, reqs, decode: bool):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        new_locs, seq, prefix, new = [], [], [], []
        for idx, pre, n, page in reqs:
            if idx not in self.locs:
                self.locs[idx] = self.locs.get(0, [])[:pre] + list(range(page * PAGE, page * PAGE + n))
            else:
                self.locs[idx].append(self.locs[idx][-1] + 1)
            rows = self.locs[idx]
            self.pools.req_to_token_pool.req_to_token[idx, : len(rows)] = torch.tensor(rows, dtype=torch.int32)
            new_locs += rows[-n:]
            seq.append(len(rows))
            prefix.append(len(rows) - n)
            new.append(n)
        npu = "npu"
        return types.SimpleNamespace(
            forward_mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND, batch_size=len(reqs),
            req_pool_indices=torch.tensor([r[0] for r in reqs], device=npu),
            seq_lens=torch.tensor(seq, device=npu), seq_lens_cpu=torch.tensor(seq),
            out_cache_loc=torch.tensor(new_locs, device=npu),
            extend_seq_lens=None if decode else torch.tensor(new, dtype=torch.int32, device=npu),
            extend_seq_lens_cpu=None if decode else new, extend_prefix_lens_cpu=None if decode else prefix,
            extend_prefix_lens=None if decode else torch.tensor(prefix, device=npu), spec_info=None,
            spec_algorithm=None, encoder_lens=None, encoder_out_cache_loc=None, attn_cp_metadata=None,
            global_num_token_non_padded_cpu=sum(new),
        )  # fmt: skip

    def step(self, reqs, decode: bool, seed: int) -> None:
        from sglang.srt.layers.radix_attention import RadixAttention

        batch = self._batch(reqs, decode)
        self.backend.init_forward_metadata(batch)
        tokens = sum(r[2] for r in reqs)
        for layer_id in range(ref.LAYERS):
            layer = RadixAttention(num_heads=ref.HEADS, head_dim=ref.DIM, scaling=ref.DIM**-0.5,
                                   num_kv_heads=ref.KV_HEADS, layer_id=layer_id)  # fmt: skip
            q = ref.queries(tokens, seed + layer_id).to("npu")
            k, v = (ref.kv_values(tokens, seed + 100 * s + layer_id).to("npu") for s in (1, 2))
            forward = self.backend.forward_decode if decode else self.backend.forward_extend
            with twin.count_host_syncs() as seen:
                out = forward(q, k, v, layer, batch)
            if decode:
                self.syncs += seen
                self.kernels |= set(twin.SYNCS.kernels)
            self._compare(reqs, layer_id, q, k, v, out)

    def _compare(self, reqs, layer_id, q, k, v, out) -> None:
        start = 0
        for idx, pre, n, _ in reqs:
            given = self.kv.setdefault((idx, layer_id), [])
            if not given and pre:  # the shared prefix: request 0's first tokens
                given += [t[:pre] for t in self.kv[(0, layer_id)]]
            given[:] = [torch.cat([g, x[start : start + n]]) if given else x[start : start + n] for g, x in
                        zip(given or [None, None], (k, v))]  # fmt: skip
            read = [ref.reference_read(self.mode, t, None if self.scales is None else s)
                    for t, s in zip(given, self.scales or (None, None))]  # fmt: skip
            want = ref.attention(q[start : start + n], *read, ref.DIM**-0.5)
            got = out[start : start + n].float()
            self.errors.append(float((got - want).abs().max() / want.abs().max()))
            start += n


def _calibration(mode: str):
    if not mode.startswith("c8_static"):
        return None
    from runtime_ext.kv_cache.calibration import load_raw_calibration

    return load_raw_calibration(ref.Path(os.environ["STRUCTSERVE_KV_CALIBRATION"]))


C8_MODES = [m for m in KV_MODES if m != "bf16"]


@pytest.mark.parametrize("mode", C8_MODES)
def test_device_npu_builds_sglang_npu_pool_holding_our_method(mode):
    from sglang.srt.hardware_backend.npu.attention.ascend_backend import AscendAttnBackend
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool

    served = serve(mode)
    pool = served.pools.token_to_kv_pool
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        assert resolved(served.args, name) == "ascend", name
    assert isinstance(served.backend, AscendAttnBackend) and isinstance(pool, NPUMHATokenToKVPool)
    assert pool.quant_method is served.method and pool.quant_method.name == mode
    assert pool.k_buffer[0].dtype == torch.int8 and pool.k_scale_buffer is not None  # stored int8, scales kept
    assert pool.quant_method.kind == "npu"  # the NPU ops table (ops/kv_npu.py), not the CPU kernels


@pytest.mark.parametrize("mode", KV_MODES)
def test_ascend_extend_and_decode_equal_the_cpu_reference_read(mode):
    """Every request's output of both extends and the decode, each layer: within bf16 tolerance of
    causal attention over the reference read (relative to the output's largest value)."""
    errors = serve(mode).run.errors
    assert len(errors) == ref.LAYERS * 6
    assert max(errors) < 2**-7, errors


NPU_OPS = {  # what a decode step's store, read and attention call on the NPU (ops/kv_npu.py; SGLang)
    "bf16": {"_npu_reshape_and_cache", "_npu_paged_attention"},
    "c8_dynamic": {"npu_linear", "npu_dynamic_quant", "_npu_paged_attention"},  # K and V rotated
    "c8_static": {"npu_quantize", "npu_anti_quant", "_npu_paged_attention"},
    "c8_static_residual": {"npu_quantize", "npu_anti_quant", "_npu_paged_attention"},
}


@pytest.mark.parametrize("mode", KV_MODES)
def test_decode_stores_and_reads_through_the_npu_ops(mode):
    assert serve(mode).run.kernels == NPU_OPS[mode]


@pytest.mark.parametrize("mode", SYNC_FREE)
def test_c8_decode_store_and_read_make_no_host_sync(mode):
    assert serve(mode).run.syncs == []


def test_c8_static_residual_decode_host_syncs_are_its_bookkeeping():
    """The residual side buffer's bookkeeping syncs (outlier count, slot index): stated, not zero."""
    syncs = serve("c8_static_residual").run.syncs
    print(f"c8_static_residual: {len(syncs)} host syncs per decode step ({ref.LAYERS} layers): {Counter(syncs)}")
    assert syncs and serve("bf16").run.syncs == []


def test_the_twin_counts_a_sync_on_an_npu_tensor_only():
    on_npu, on_host = torch.zeros(3, device="npu"), torch.zeros(3)
    with twin.count_host_syncs() as seen:
        bool(on_host.any())
        bool((on_npu + 1).any())  # computed from an npu tensor: still on the npu
        on_npu.tolist()
    assert seen == ["__bool__", "tolist"]


def test_c8_static_residual_is_refused_by_the_scheduler_on_ascend(monkeypatch):
    """Its host syncs cannot be held by SGLang's NPU graph capture: refused naming the setting."""
    monkeypatch.setitem(support.SERVED, "npu", SERVED_ON_NPU)
    model = write_model(ref.Path(os.environ["STRUCTSERVE_KV_CALIBRATION"]).parent / "model")
    args = resolved_args(engine_options(model, kv_cache="c8_static_residual", page_size=PAGE))
    with pytest.raises(ValueError, match="kv_cache: c8_static_residual is not supported on device: npu yet: .*graph"):
        build_pools(args)

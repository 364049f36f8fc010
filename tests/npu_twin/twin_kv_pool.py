"""SGLang 0.5.23's own resolution and KV pool for ``engine.device: npu``, run under the torch_npu twin
(started by ``test_under_twin.py``; docs/npu-twin.md).

- The service's engine arguments for ``device: npu`` resolve, through SGLang's platform hooks, to
  the ``ascend`` attention backend (the service's ``torch_native`` default is overridden), and
  SGLang's ``KVCacheConfigurator`` (runtime_ext registered by SGLang's plugin loader) builds
  ``NPUMHATokenToKVPool``; its NPU store (``_npu_reshape_and_cache``, under its documented
  contract) keeps bf16 K/V exactly.
- SGLang's own NPU pool takes no KV quant method (an int8 one holds K/V truncated to int8): for a
  C8 mode runtime_ext's hook builds ``C8NPUMHATokenToKVPool`` holding its method, and an int8 pool
  without the method is refused as soon as it is built. The plugin's report describes the pool
  from the live objects, not from what was configured.
"""

from __future__ import annotations

import os
import types

import pytest
import torch

from tests.npu_twin import twin

twin.require()

from runtime_ext.kv_cache import support  # noqa: E402
from runtime_ext.kv_cache.sizing import KV_MODES  # noqa: E402
from runtime_ext.plugin import _STATE, kv_serving_report  # noqa: E402
from runtime_ext.report import KVServing  # noqa: E402
from tests.npu_twin.c8_reference import reference_read, write_calibration  # noqa: E402
from tests.npu_twin.sglang_npu import (  # noqa: E402
    attention_backend,
    build_pools,
    engine_options,
    resolved,
    resolved_args,
    write_model,
)

C8_MODES = [m for m in KV_MODES if m != "bf16"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded(tmp_path_factory):
    """SGLang's own plugin loading: runtime_ext's entry point (``register()``), then its hooks applied;
    a static-scales file for the C8-S modes."""
    from sglang.srt.plugins import load_plugins

    load_plugins()
    assert os.getpid() in _STATE.registered_pids
    path = write_calibration(tmp_path_factory.mktemp("calib") / "kv.json", [_values()])
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STRUCTSERVE_KV_CALIBRATION", str(path))
        env.setitem(support.SERVED, "npu", KV_MODES)  # C8-S + residual's pool too (refused when served)
        yield


@pytest.fixture
def kv_state():
    """runtime_ext's KV hook state, restored after a test that edits it."""
    saved = (_STATE.kv_cache.name, _STATE.kv_cache.built)
    yield _STATE.kv_cache
    _STATE.kv_cache.name, _STATE.kv_cache.built = saved


def _store_and_read(pool, values: torch.Tensor) -> torch.Tensor:
    """Store ``values`` as K and V of layer 0 at rows 16.. through the pool's own ``set_kv_buffer``;
    read the K rows back as SGLang's ascend kernels get them (``get_key_buffer``)."""
    from sglang.srt.layers.radix_attention import RadixAttention

    tokens, heads, dim = values.shape
    layer = RadixAttention(num_heads=2 * heads, head_dim=dim, scaling=dim**-0.5, num_kv_heads=heads, layer_id=0)
    loc = torch.arange(16, 16 + tokens)
    pool.set_kv_buffer(layer, loc, values.clone(), values.clone())
    return pool.get_key_buffer(0).reshape(-1, heads, dim)[loc]


def _values() -> torch.Tensor:
    return (torch.linspace(-2.5, 2.5, 3 * 2 * 64) + 0.37).reshape(3, 2, 64).to(torch.bfloat16)


def test_device_npu_resolves_to_sglang_ascend_backend(model_dir):
    options = engine_options(model_dir)
    assert options.engine.attention_backend == "torch_native"  # the service's default, asked for
    args = resolved_args(options)
    from sglang.srt.platforms import current_platform
    from sglang.srt.runtime_context import get_exec

    assert current_platform.device_name == "npu"
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        assert resolved(args, name) == "ascend", name
    assert get_exec().kernel.attention_backend == "ascend"


def test_bf16_builds_sglang_npu_pool_and_stores_through_it(model_dir):
    from sglang.srt.hardware_backend.npu.allocator_npu import NPUPagedTokenToKVPoolAllocator
    from sglang.srt.hardware_backend.npu.attention.ascend_backend import AscendAttnBackend
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool

    args = resolved_args(engine_options(model_dir, kv_cache="bf16"))
    configurator, pools = build_pools(args)
    pool = pools.token_to_kv_pool
    assert isinstance(pool, NPUMHATokenToKVPool) and isinstance(
        pools.token_to_kv_pool_allocator, NPUPagedTokenToKVPoolAllocator
    )
    assert (pool.store_dtype, pool.quant_method.name, pool.page_size) == (torch.bfloat16, "unquantized", 16)
    assert isinstance(attention_backend(args, configurator, pools), AscendAttnBackend)
    values = _values()
    assert torch.equal(_store_and_read(pool, values), values)  # SGLang's NPU store, the emulated ATB op


def _truncating(pool) -> bool:
    return pool.store_dtype == torch.int8 and pool.get_kv_cache_quant_method().name == "unquantized"


@pytest.mark.parametrize("mode", C8_MODES)
def test_c8_on_npu_builds_sglang_npu_pool_holding_our_method(model_dir, kv_state, mode):
    """The pool SGLang builds on device npu for a C8 mode holds runtime_ext's method, stores int8 with
    its scales and reads back what the CPU reference reads; never int8 buffers read raw (what SGLang's
    NPU pool does with an int8 dtype and no method: truncation)."""
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool

    args = resolved_args(engine_options(model_dir, kv_cache=mode))
    _, pools = build_pools(args)
    pool = pools.token_to_kv_pool
    values = _values()
    read = _store_and_read(pool, values).to(torch.float32)
    assert isinstance(pool, NPUMHATokenToKVPool) and not _truncating(pool)
    assert pool.get_kv_cache_quant_method() is kv_state.built and kv_state.built.name == mode
    scale = None if mode == "c8_dynamic" else pool.k_scale_buffer[0]
    want = reference_read(mode, values, scale)
    assert (read - want).abs().max() <= 2**-8 * want.abs().max()  # one bf16 rounding of the read


def test_pool_check_refuses_an_int8_pool_without_the_method(model_dir, kv_state, monkeypatch):
    """The second line: had the NPU pool been built for c8_dynamic without runtime_ext's method (the
    builder SGLang ships: no quant method), that pool is refused as soon as it is built."""
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool

    from runtime_ext.kv_cache import npu_pool

    def sglang_builder(configurator, *, max_total_num_tokens):  # _build_ascend_mha_kv_pool's pool
        return NPUMHATokenToKVPool(max_total_num_tokens, page_size=16, dtype=torch.int8, head_num=2, head_dim=64,
                                   layer_num=2, device="npu", enable_memory_saver=False)  # fmt: skip

    monkeypatch.setattr(npu_pool, "build_c8_pool", sglang_builder)
    args = resolved_args(engine_options(model_dir, kv_cache="c8_dynamic"))
    with pytest.raises(
        ValueError, match="kv_cache: c8_dynamic: SGLang built NPUMHATokenToKVPool without runtime_ext's"
    ):
        build_pools(args)


def test_report_reads_the_live_objects_not_the_configuration(model_dir, kv_state):
    """The pool ``_build_ascend_mha_kv_pool`` builds for an int8 dtype, while runtime_ext's hook state
    says c8_dynamic: the report says what the objects are (and the objects truncate)."""
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool

    args = resolved_args(engine_options(model_dir, kv_cache="bf16"))
    configurator, pools = build_pools(args)
    pool = NPUMHATokenToKVPool(64, page_size=16, dtype=torch.int8, head_num=2, head_dim=64, layer_num=2,
                               device="npu", enable_memory_saver=False)  # fmt: skip
    kv_state.name = "c8_dynamic"
    scheduler = types.SimpleNamespace(
        token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=lambda: pool),
        tp_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(attn_backend=attention_backend(args, configurator, pools))
        ),
    )
    assert kv_serving_report(scheduler) == KVServing(
        pool_class="NPUMHATokenToKVPool",
        store_dtype="int8",
        quant_method="unquantized",
        attention_backend="AscendAttnBackend",
    )
    values = _values()
    assert torch.equal(_store_and_read(pool, values), values.to(torch.int8))  # 0.37 -> 0, 2.87 -> 2: truncated

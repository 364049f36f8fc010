"""Hooks that make SGLang build runtime_ext's C8 KV methods (``methods.py``).

SGLang 0.5.23 has no INT8 KV cache (``--kv-cache-dtype`` offers auto/bf16/fp8/fp4). The
plugin adds (``register``):

1. Our methods in ``KV_CACHE_QUANT_REGISTRY``, each with a PLAIN access for CPU/NPU
   attention backends (stored int8, read dequantized).
2. An AROUND hook on ``configure_kv_cache_dtype`` mapping our names to int8 storage
   (and remembering the model dtype, which reads dequantize to).
3. An AROUND hook on ``KVCacheConfigurator._build_mha_quant_method`` returning our
   method when that name was configured.
4. AFTER hooks on the allocators' page release (and ``clear``): the method releases
   side-buffer slots (C8-S residuals) and poison marks of the freed pages.
5. A BEFORE hook on ``Scheduler.process_batch_result``: a request whose K/V a store could not
   keep (NaN/inf, float16 scale overflow) is finished with an error there, alone (``poison.py``).
6. An AROUND hook on ``KVCacheConfigurator._build_ascend_mha_kv_pool`` (``device: npu``: SGLang
   resolves the ``ascend`` backend and builds its NPU pool there, with no quant method): for one
   of our names it builds ``npu_pool.C8NPUMHATokenToKVPool``, SGLang's NPU pool holding our
   method (store through the NPU quantize ops, reads dequantized).

Never an int8 pool without our method (``support.py``): hook 2 refuses, on the ``ascend`` backend,
a name ``support.SERVED`` does not list for npu, and an AFTER hook on
``KVCacheConfigurator._build_token_to_kv_pool`` refuses any int8 pool built for one of our names
that does not hold the method hook 3 built (a pool family that passes none: MLA, hybrid SWA).

Bytes per token come from ``sizing.cell_bytes`` (what is stored; see there).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from runtime_ext.kv_cache.sizing import KV_MODES
from runtime_ext.kv_cache.support import unsupported_kv_cache
from runtime_ext.state import KVCacheState

KV_METHODS = KV_MODES[1:]  # ours; "bf16" is SGLang's unquantized cache
CONFIGURE_TARGET = "sglang.srt.mem_cache.kv_cache_dtype.configure_kv_cache_dtype"
_CONFIGURATOR = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
BUILD_TARGET = f"{_CONFIGURATOR}._build_mha_quant_method"
POOL_TARGET = f"{_CONFIGURATOR}._build_token_to_kv_pool"
ASCEND_POOL_TARGET = f"{_CONFIGURATOR}._build_ascend_mha_kv_pool"
_ALLOCATOR = "sglang.srt.mem_cache.allocator.paged.PagedTokenToKVPoolAllocator"
_TOKEN_ALLOCATOR = "sglang.srt.mem_cache.allocator.token.TokenToKVPoolAllocator"  # page_size 1
_PROCESS_RESULT = "sglang.srt.managers.scheduler.Scheduler.process_batch_result"
_ATTENTION_BACKENDS = frozenset({"torch_native", "ascend", "intel_amx", "triton"})


def _configure(state: KVCacheState, original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``configure_kv_cache_dtype``: our names store int8."""
    import torch

    name = kwargs.get("server_args_kv_cache_dtype")
    if name not in KV_METHODS:
        return original(*args, **kwargs)
    from sglang.srt.runtime_context import get_exec

    if get_exec().kernel.attention_backend == "ascend" and (error := unsupported_kv_cache(name, "npu")):
        raise ValueError(error)  # SGLang builds its NPU pool there: only the modes wired into it (npu_pool.py)
    state.name, state.model_dtype = name, kwargs.get("model_dtype")
    return name, torch.int8


def _build(state: KVCacheState, original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``_build_mha_quant_method``: our method when one of our names was configured."""
    import torch

    if state.name in KV_METHODS and self.kv_cache_dtype == torch.int8:
        from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import get_kv_cache_quant_method

        method = get_kv_cache_quant_method(state.name, dtype=state.model_dtype or torch.bfloat16)
        state.built = method
        return method
    return original(self, *args, **kwargs)


def _build_ascend(state: KVCacheState, original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``_build_ascend_mha_kv_pool``: for one of our names, SGLang's NPU pool holding our method."""
    import torch

    if state.name in KV_METHODS and self.kv_cache_dtype == torch.int8:
        from runtime_ext.kv_cache.npu_pool import build_c8_pool

        return build_c8_pool(self, *args, **kwargs)
    return original(self, *args, **kwargs)


def _check_pool(state: KVCacheState, pool: Any, configurator: Any, *_args: Any, **_kwargs: Any) -> None:
    """AFTER ``_build_token_to_kv_pool``: an int8 pool built for one of our names holds our method."""
    import torch

    if state.name not in KV_METHODS or configurator.kv_cache_dtype != torch.int8:
        return
    method = pool.get_kv_cache_quant_method() if hasattr(pool, "get_kv_cache_quant_method") else None
    if state.built is None or method is not state.built:
        raise ValueError(
            f"kv_cache: {state.name}: SGLang built {type(pool).__name__} without runtime_ext's {state.name} "
            "method, so its int8 buffers would hold K/V truncated to int8; this model's KV pool cannot serve "
            "a C8 cache yet: use kv_cache: bf16 (docs/npu-twin.md)"
        )


def _released(state: KVCacheState, _result: Any, allocator: Any, *page_ids: Any) -> None:
    """AFTER ``_release_page_ids``: free the side-buffer slots of those pages' tokens."""
    method = state.built
    if method is None or not page_ids:
        return
    import torch

    pages = torch.cat([p.reshape(-1) for p in page_ids])
    offsets = torch.arange(allocator.page_size, device=pages.device)
    method.release((pages.unsqueeze(1) * allocator.page_size + offsets).flatten())


def _freed(state: KVCacheState, _result: Any, _allocator: Any, free_index: Any) -> None:
    """AFTER the page-size-1 allocator's ``free``: token ids are page ids."""
    method = state.built
    if method is not None:
        method.release(free_index.reshape(-1))


def _cleared(state: KVCacheState, _result: Any, _allocator: Any, *_args: Any) -> None:
    method = state.built
    for side in getattr(method, "sides", {}).values():
        side.clear()
    if (poison := getattr(method, "poison", None)) is not None:
        poison.reset()


def _process_result(state: KVCacheState, scheduler: Any, batch: Any, *_args: Any, **_kwargs: Any) -> None:
    """BEFORE ``process_batch_result``: fail the requests that own rows a store refused."""
    poison = getattr(state.built, "poison", None)
    if poison is not None:
        from runtime_ext.kv_cache.poison import fail_poisoned_requests

        fail_poisoned_requests(poison, scheduler, batch)


def register(hooks: Any, hook_type: Any, state: KVCacheState) -> None:
    """Our methods in SGLang's registries, and the hooks (they record into ``state``)."""
    import torch
    from sglang.srt.layers.quantization import fp4_kv_cache_quant_method as fp4

    from runtime_ext.kv_cache.methods import METHODS

    matcher = fp4.KVCacheBackendMatcher(exact=_ATTENTION_BACKENDS)
    for cls in METHODS:
        fp4.KV_CACHE_QUANT_REGISTRY[cls.name] = cls
        fp4.KV_CACHE_ATTENTION_ACCESS_REGISTRY[cls.name] = tuple(
            fp4.KVCacheAttentionAccess(
                phase,
                fp4.KVCacheAttentionAccessKind.PLAIN,
                matcher,
                storage_dtype=torch.int8,
                attention_kv_dtype=torch.bfloat16,
            )
            for phase in (fp4.KVCacheAttentionPhase.PREFILL, fp4.KVCacheAttentionPhase.DECODE)
        )
    hooks.register(CONFIGURE_TARGET, partial(_configure, state), hook_type.AROUND)
    hooks.register(BUILD_TARGET, partial(_build, state), hook_type.AROUND)
    hooks.register(ASCEND_POOL_TARGET, partial(_build_ascend, state), hook_type.AROUND)
    hooks.register(POOL_TARGET, partial(_check_pool, state), hook_type.AFTER)
    hooks.register(f"{_ALLOCATOR}._release_page_ids", partial(_released, state), hook_type.AFTER)
    hooks.register(f"{_TOKEN_ALLOCATOR}.free", partial(_freed, state), hook_type.AFTER)
    hooks.register(_PROCESS_RESULT, partial(_process_result, state), hook_type.BEFORE)
    for allocator in (_ALLOCATOR, _TOKEN_ALLOCATOR):
        hooks.register(f"{allocator}.clear", partial(_cleared, state), hook_type.AFTER)

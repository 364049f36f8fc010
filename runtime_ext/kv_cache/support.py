"""Which ``kv_cache`` modes each ``engine.device`` serves, and the error for one it does not (pure).

On ``device: npu`` SGLang 0.5.23 resolves every attention backend to ``ascend``
(``hardware_backend/npu/utils.py`` ``set_default_server_args``). ``KVCacheConfigurator`` then
builds the KV pool through ``_build_ascend_mha_kv_pool``: an ``NPUMHATokenToKVPool`` that takes
no KV quant method, stores with ``cache_k.to(dtype)`` and is read raw by the ascend kernels.
runtime_ext's C8 methods are not wired into that pool, so a C8 mode there would store K/V
truncated to int8. It is refused twice: by the service's settings before the engine starts, and
by the plugin's KV hooks in the scheduler (``sglang_hooks``). docs/npu-twin.md has the evidence.
"""

from __future__ import annotations

from runtime_ext.kv_cache.sizing import KV_MODES

SERVED: dict[str, tuple[str, ...]] = {
    "cpu": tuple(KV_MODES),
    "npu": ("bf16",),
}


def unsupported_kv_cache(mode: str, device: str) -> str | None:
    """The startup error for ``kv_cache: mode`` on ``engine.device: device``; None when it is served."""
    if mode in SERVED.get(device, ()):
        return None
    return (
        f"kv_cache: {mode} is not supported on device: {device} yet: SGLang 0.5.23 serves device: npu "
        "with its ascend attention backend, whose KV pool (NPUMHATokenToKVPool) takes no KV quant method "
        "and is read raw, so an int8 pool there would hold K/V truncated to int8. "
        f"Use kv_cache: {' or '.join(SERVED.get(device, ('bf16',)))} on device: {device} (docs/npu-twin.md)"
    )

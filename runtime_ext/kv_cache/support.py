"""Which ``kv_cache`` modes each ``engine.device`` serves, and the error for one it does not (pure).

On ``device: npu`` SGLang 0.5.23 resolves every attention backend to ``ascend``
(``hardware_backend/npu/utils.py`` ``set_default_server_args``), and ``KVCacheConfigurator``
builds the KV pool through ``_build_ascend_mha_kv_pool``: an ``NPUMHATokenToKVPool`` that takes no
KV quant method and would store K/V truncated to int8. runtime_ext's hook builds its subclass
holding the C8 method instead (``npu_pool.py``): stores through the NPU quantize ops, the
``ascend`` kernels read the layer dequantized. ``SERVED`` lists the modes wired that way (C8-S +
residual is not: its side buffer syncs the host, ``NOT_SERVED``); any other is refused twice: by
the service's settings before the engine starts, and by the plugin's KV hooks in the scheduler
(``sglang_hooks``). docs/npu-twin.md has the evidence.
"""

from __future__ import annotations

from runtime_ext.kv_cache.sizing import KV_MODES

SERVED: dict[str, tuple[str, ...]] = {
    "cpu": tuple(KV_MODES),
    "npu": ("bf16", "c8_dynamic", "c8_static"),  # bf16: SGLang's own NPU pool; C8: npu_pool.C8NPUMHATokenToKVPool
}
# Why a mode is not served on a device (the default: not wired into the pool SGLang builds there).
NOT_SERVED = {
    ("c8_static_residual", "npu"): (
        "its INT4 residual side buffer syncs the host in every store and read (12 syncs per decode step "
        "of a two-layer model, counted under the torch_npu twin), which SGLang's NPU graph capture, on "
        "by default on device: npu, cannot hold"
    ),
}


def unsupported_kv_cache(mode: str, device: str) -> str | None:
    """The startup error for ``kv_cache: mode`` on ``engine.device: device``; None when it is served."""
    if mode in SERVED.get(device, ()):
        return None
    why = NOT_SERVED.get((mode, device)) or (
        "SGLang 0.5.23 serves device: npu with its ascend attention backend, and runtime_ext's KV pool "
        "for it (C8NPUMHATokenToKVPool) does not serve this mode"
    )
    return (
        f"kv_cache: {mode} is not supported on device: {device} yet: {why}. "
        f"Use kv_cache: {' or '.join(SERVED.get(device, ('bf16',)))} on device: {device} (docs/npu-twin.md)"
    )


def unsupported_kv_cache_with_pd(mode: str, disaggregation: str | None) -> str | None:
    """The startup error for ``kv_cache: mode`` on a PD replica (``engine.disaggregation.mode``);
    None when it is served. SGLang 0.5.23 registers for the KV transfer only the pool's K and V
    buffers (``MHATokenToKVPool._pd_registerable_tensors``), not a C8 method's scales or residual
    side buffers: decode would read the int8 K/V under scales that never arrived."""
    if disaggregation is None or mode == "bf16":
        return None
    return (
        f"kv_cache: {mode} is not supported with engine.disaggregation.mode: {disaggregation} yet: SGLang "
        "moves only the KV pool's K and V buffers from prefill to decode, not the C8 scales, so decode would "
        "read the int8 K/V under the wrong scales. Use kv_cache: bf16 on both PD replicas (docs/scale-out.md)"
    )

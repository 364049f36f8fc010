"""KV-cache startup: the calibration check for the static C8 modes, and the pool size.

``engine.kv_cache_bytes`` (when set) is a KV memory budget: the pool gets as many whole
pages as fit at the selected mode's bytes per token (``runtime_ext.kv_cache.sizing``), so
at one budget C8 holds ~1.9-2x the tokens of bf16. Otherwise ``engine.max_total_tokens``.
"""

from __future__ import annotations

import os
from pathlib import Path

from service.settings import Settings

STATIC_MODES = ("c8_static", "c8_static_residual")


def check_kv_cache(settings: Settings, model_dir: Path):
    """The static modes need a calibration file made for this model (a startup error
    otherwise); the scheduler process reads it through the environment. Returns it (or None)."""
    if settings.kv_cache not in STATIC_MODES:
        return None
    from runtime_ext.kv_cache.calibration import load_calibration, model_kv_shape
    from runtime_ext.kv_cache.sglang_method import CALIBRATION_ENV

    if settings.kv_calibration is None:
        raise ValueError(f"kv_cache {settings.kv_cache} needs kv_calibration (STRUCTSERVE_KV_CALIBRATION): a file "
                         "from `structserve kv calibrate --model ... --out FILE`")
    calib = load_calibration(settings.kv_calibration, *model_kv_shape(model_dir))
    os.environ[CALIBRATION_ENV] = str(settings.kv_calibration.resolve())
    return calib


def pool_tokens(settings: Settings, model_dir: Path, calib=None) -> int:
    """KV pool size in tokens: from the byte budget when one is set."""
    budget = settings.engine.kv_cache_bytes
    if budget is None:
        return settings.engine.max_total_tokens
    from runtime_ext.kv_cache.calibration import model_kv_shape
    from runtime_ext.kv_cache.sizing import cell_bytes, tokens_for_budget

    layers, heads, dim = model_kv_shape(model_dir)
    cell = cell_bytes(settings.kv_cache, layers, heads, dim, calib.outlier_rate if calib else 0.0)
    return tokens_for_budget(budget, cell, settings.engine.page_size)

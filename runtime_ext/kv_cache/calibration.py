"""Offline calibration for the static C8 KV methods, and the file format it writes.

``calibrate`` runs real text through the model (HF transformers, float32) in chunks,
reads the post-RoPE K and V each layer caches, and records per layer / K-or-V / head /
channel absmax -> static scales ``absmax / 127``. It then measures, on the same tokens,
the relative INT8 error ε = ‖x − deq(q(x))‖/‖x‖ of every (token, head) vector under those
scales, and sets the residual threshold τ = 3 × mean ε (the outlier rate is the share
of vectors above τ).

File (JSON, ``format: structserve-kv-c8/1``): model shape (layers, kv_heads, head_dim),
``k_scale``/``v_scale`` as ``[layers][kv_heads][head_dim]``, ``tau``, ε statistics and the
token count. ``load_calibration`` checks it against the serving model's shape and raises
``CalibrationMismatchError`` naming what differs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

FORMAT = "structserve-kv-c8/1"
TAU_FACTOR = 3.0


class CalibrationMismatchError(ValueError):
    """A calibration file does not fit the model (or is not one)."""


@dataclass(frozen=True)
class Calibration:
    model: str
    layers: int
    kv_heads: int
    head_dim: int
    k_scale: list  # [layers][kv_heads][head_dim]
    v_scale: list
    tau: float
    eps_mean: float
    eps_p99: float
    outlier_rate: float
    tokens: int
    format: str = FORMAT

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)


def load_raw_calibration(path: Path) -> Calibration:
    """Read a calibration file (``CalibrationMismatchError`` if it is not one)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CalibrationMismatchError(f"cannot read KV calibration file {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CalibrationMismatchError(f"{path} is not a {FORMAT} KV calibration file; run `structserve kv calibrate`")
    return Calibration(**data)


def check_shape(calib: Calibration, path: Any, layers: int, kv_heads: int, head_dim: int) -> Calibration:
    """``calib`` if it was made for this KV shape, else ``CalibrationMismatchError`` naming what differs."""
    for what, have, want in (("layers", calib.layers, layers), ("kv_heads", calib.kv_heads, kv_heads),
                             ("head_dim", calib.head_dim, head_dim)):
        if have != want:
            raise CalibrationMismatchError(
                f"KV calibration {path} was made for {what}={have} (model {calib.model!r}) but the served model "
                f"has {what}={want}; calibrate this model with `structserve kv calibrate --model ...`")
    return calib


def load_calibration(path: Path, layers: int, kv_heads: int, head_dim: int) -> Calibration:
    """Read ``path`` and check it matches the model's KV shape."""
    return check_shape(load_raw_calibration(path), path, layers, kv_heads, head_dim)


def _chunks(ids: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(ids) - 1, size):
        yield ids[start:start + size]


def calibrate(model_dir: Path, text: str, *, tokens: int = 2048, chunk: int = 256,
              progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it) -> Calibration:
    """Scales and τ for ``model_dir`` from the first ``tokens`` tokens of ``text``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from runtime_ext.ops import kv_ref

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = tok.encode(text[: tokens * 16], add_special_tokens=False)[:tokens]  # ~4 chars per token: plenty
    keys: list[list[Any]] = []
    values: list[list[Any]] = []
    with torch.no_grad():
        for piece in progress(list(_chunks(ids, chunk))):
            cache = model(torch.tensor([piece]), use_cache=True).past_key_values
            for layer, entry in enumerate(cache.layers):
                if layer == len(keys):
                    keys.append([]), values.append([])
                keys[layer].append(entry.keys[0].transpose(0, 1))  # [T, H, D]
                values[layer].append(entry.values[0].transpose(0, 1))
    k = [torch.cat(parts) for parts in keys]
    v = [torch.cat(parts) for parts in values]
    k_scale = [(x.abs().amax(dim=0) / kv_ref.INT8_MAX).clamp_min(1e-8) for x in k]
    v_scale = [(x.abs().amax(dim=0) / kv_ref.INT8_MAX).clamp_min(1e-8) for x in v]
    eps = torch.cat([kv_ref.relative_error(x, kv_ref.dequantize_static(kv_ref.quantize_static(x, s), s, torch.float32))
                     .flatten() for x, s in zip(k + v, k_scale + v_scale)])
    tau = TAU_FACTOR * float(eps.mean())
    _, heads, dim = k[0].shape
    return Calibration(
        model=Path(model_dir).name, layers=len(k), kv_heads=heads, head_dim=dim,
        k_scale=[s.tolist() for s in k_scale], v_scale=[s.tolist() for s in v_scale], tau=tau,
        eps_mean=float(eps.mean()), eps_p99=float(eps.quantile(0.99)),
        outlier_rate=float((eps > tau).float().mean()), tokens=len(ids),
    )

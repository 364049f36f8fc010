"""The file format of the static C8 KV calibration, and its loading while serving.

``structserve kv calibrate`` (``tools/kv_calibrate.py``) measures the scales and the residual
threshold τ offline and writes them with ``Calibration.save``.

File (JSON, ``format: structserve-kv-c8/1``): model shape (layers, kv_heads, head_dim),
``k_scale``/``v_scale`` as ``[layers][kv_heads][head_dim]``, ``tau``, ε statistics and the
token count. ``load_calibration`` checks it against the serving model's shape and raises
``CalibrationMismatchError`` naming what differs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT = "structserve-kv-c8/1"


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
    for what, have, want in (
        ("layers", calib.layers, layers),
        ("kv_heads", calib.kv_heads, kv_heads),
        ("head_dim", calib.head_dim, head_dim),
    ):
        if have != want:
            raise CalibrationMismatchError(
                f"KV calibration {path} was made for {what}={have} (model {calib.model!r}) but the served model "
                f"has {what}={want}; calibrate this model with `structserve kv calibrate --model ...`"
            )
    return calib


def load_calibration(path: Path, layers: int, kv_heads: int, head_dim: int) -> Calibration:
    """Read ``path`` and check it matches the model's KV shape."""
    return check_shape(load_raw_calibration(path), path, layers, kv_heads, head_dim)

"""The file format of the static C8 KV calibration, and its loading while serving.

``structserve kv calibrate`` (``tools/kv_calibrate.py``) measures the scales and the residual
threshold τ offline and writes them with ``Calibration.save``.

File (JSON, ``format: structserve-kv-c8/1``): model shape (layers, kv_heads, head_dim),
``k_scale``/``v_scale`` as ``[layers][kv_heads][head_dim]``, ``tau``, ε statistics, the
token count and ``rotation`` (``none``/``k``/``kv``: the scales of a rotated side are per channel
of the rotated vectors; a file without the key predates rotation and is ``none``).
``load_calibration`` checks it against the serving model's shape and rotation and raises
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
    rotation: str = "none"

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)


def load_raw_calibration(path: Path) -> Calibration:
    """Read a calibration file (``CalibrationMismatchError`` if it is not one: unreadable, not
    UTF-8 JSON, missing or unknown fields, scales not shaped ``[layers][kv_heads][head_dim]``)."""
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CalibrationMismatchError(f"cannot read KV calibration file {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CalibrationMismatchError(f"{path} is not a {FORMAT} KV calibration file; run `structserve kv calibrate`")
    try:
        calib = Calibration(**data)
    except TypeError as exc:
        raise CalibrationMismatchError(
            f"{path} has missing or unknown fields ({exc}); run `structserve kv calibrate`"
        ) from exc
    return _check_fields(calib, path)


def _check_fields(calib: Calibration, path: Any) -> Calibration:
    """``calib`` if its counts are integers, its statistics numbers and its scales shaped as it says."""
    counts = (calib.layers, calib.kv_heads, calib.head_dim, calib.tokens)
    stats = (calib.tau, calib.eps_mean, calib.eps_p99, calib.outlier_rate)
    shape = (calib.layers, calib.kv_heads, calib.head_dim)
    if not all(type(n) is int and n >= 0 for n in counts) or not all(_is_number(x) for x in stats):
        raise CalibrationMismatchError(
            f"{path}: layers, kv_heads, head_dim, tokens must be integers, tau and eps numbers"
        )
    for side, scales in (("k_scale", calib.k_scale), ("v_scale", calib.v_scale)):
        if not _shaped(scales, shape):
            raise CalibrationMismatchError(
                f"{path}: {side} is not {list(shape)} numbers; run `structserve kv calibrate`"
            )
    return calib


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shaped(value: object, shape: tuple[int, ...]) -> bool:
    if not shape:
        return _is_number(value)
    return isinstance(value, list) and len(value) == shape[0] and all(_shaped(v, shape[1:]) for v in value)


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


def check_rotation(calib: Calibration, path: Any, rotation: str) -> Calibration:
    """``calib`` if its scales were measured in the space ``rotation`` stores, else an error naming both fixes."""
    if calib.rotation != rotation:
        raise CalibrationMismatchError(
            f"KV calibration {path} was measured with kv_rotation={calib.rotation} but the server stores "
            f"kv_rotation={rotation}: recalibrate with `structserve kv calibrate --rotation {rotation}` "
            f"or serve with kv_rotation: {calib.rotation}"
        )
    return calib


def load_calibration(path: Path, layers: int, kv_heads: int, head_dim: int, rotation: str = "none") -> Calibration:
    """Read ``path`` and check it matches the model's KV shape and the stored rotation."""
    return check_rotation(check_shape(load_raw_calibration(path), path, layers, kv_heads, head_dim), path, rotation)

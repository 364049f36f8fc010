"""Sensitive-layer scan results (pure logic: the file format and the fallback rules).

Per linear layer, ``structserve quant scan`` measures on calibration text:
- dispersion ``R = (max − min) / (Q3 − Q1)`` of the layer's input activations (outliers);
- ``kl``: KL divergence of the model's next-token distribution when only this layer is
  fake-quantized vs full precision;
- ``energy``: ``σ₁ / Σσ`` of the weight's singular values (a few directions carry it).

``select`` applies the seed rules (ARCHITECTURE.md): keep a layer in high precision when
``R ≥ 50`` or ``KL ≥ 0.05`` or ``energy > 0.42``. Absolute KL thresholds made for large models
may flag nothing on a small one, so the ``kl_top`` share of layers with the highest KL is
kept as well (default 5 %, at least one layer; 0 turns this off).

File (JSON, ``format: structserve-sensitive-layers/1``): model, scheme, ``layers`` (the
fallback list, checkpoint names), ``scores`` per layer, the thresholds used.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

FORMAT = "structserve-sensitive-layers/1"


class SensitiveLayersError(ValueError):
    """A sensitive-layers file that cannot be used (names what is wrong)."""


def load_sensitive_layers(path: Path) -> list[str]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SensitiveLayersError(f"cannot read sensitive-layers file {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("layers"), list):
        raise SensitiveLayersError(f"{path} is not a {FORMAT} file; write one with `structserve quant scan`")
    return [str(name) for name in data["layers"]]


def dispersion(sorted_values: list[float]) -> float:
    """``(max − min) / (Q3 − Q1)`` of already sorted values (inf when the IQR is 0)."""
    n = len(sorted_values)
    q1, q3 = sorted_values[n // 4], sorted_values[(3 * n) // 4]
    spread = sorted_values[-1] - sorted_values[0]
    return spread / (q3 - q1) if q3 > q1 else math.inf


THRESHOLDS = {"r_max": 50.0, "kl_max": 0.05, "energy_max": 0.42, "kl_top": 0.05}


def select(
    scores: dict[str, dict[str, float]],
    *,
    r_max: float = 50.0,
    kl_max: float = 0.05,
    energy_max: float = 0.42,
    kl_top: float = 0.05,
) -> list[str]:
    """The layers to keep in high precision (sorted by KL, highest first)."""
    ranked = sorted(scores, key=lambda name: scores[name]["kl"], reverse=True)
    top = set(ranked[: max(1, math.ceil(len(ranked) * kl_top))]) if ranked and kl_top > 0 else set()
    return [
        name
        for name in ranked
        if name in top
        or scores[name]["dispersion"] >= r_max
        or scores[name]["kl"] >= kl_max
        or scores[name]["energy"] > energy_max
    ]


def write(path: Path, model: str, scheme: str, scores: dict, layers: list[str], thresholds: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "model": model,
                "scheme": scheme,
                "layers": layers,
                "thresholds": thresholds,
                "scores": scores,
            },
            indent=1,
        )
    )


def markdown(scores: dict[str, dict[str, float]], layers: list[str]) -> str:
    """A table of every layer's scores, the kept ones marked, highest KL first."""
    rows = ["| layer | KL | dispersion R | energy σ₁/Σσ | kept |", "|---|---:|---:|---:|:---:|"]
    for name in sorted(scores, key=lambda n: scores[n]["kl"], reverse=True):
        s = scores[name]
        rows.append(
            f"| {name} | {s['kl']:.2e} | {s['dispersion']:.1f} | {s['energy']:.4f} | "
            f"{'yes' if name in layers else ''} |"
        )
    return "\n".join(rows) + "\n"

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

A fused module (qkv, gate_up) has one scheme, so the fallback list is the flagged layers closed
over fused modules (``policy.keep_reasons``): flagging ``q_proj`` keeps ``k_proj`` and ``v_proj``.

File (JSON, ``format: structserve-sensitive-layers/1``): model, scheme, ``layers`` (the
fallback list, checkpoint names, every shard of a kept fused module), ``reasons`` (layer ->
why it is kept: the rules that flagged it, or the flagged shard of its fused module), ``scores``
per layer, the thresholds used. Files written before ``reasons`` existed list only the flagged
layers; loading closes them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from runtime_ext.quant.policy import fused_closure, keep_reasons

FORMAT = "structserve-sensitive-layers/1"


class SensitiveLayersError(ValueError):
    """A sensitive-layers file that cannot be used (names what is wrong)."""


MAX_FILE_BYTES = 64 << 20  # a scan of a large model is a few MiB; more is not a sensitive-layers file
_SCORE_KEYS = ("kl", "dispersion", "energy")


def _read(path: Path) -> Any:
    """The file's JSON value; any unreadable, oversized, non-UTF-8 or invalid file is a
    ``SensitiveLayersError`` (the scheduler re-reads this file: nothing else may escape)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise SensitiveLayersError(f"sensitive-layers file {path} is larger than {MAX_FILE_BYTES >> 20} MiB")
        return json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, SensitiveLayersError):
            raise
        raise SensitiveLayersError(f"cannot read sensitive-layers file {path}: {exc}") from exc


def load_sensitive_layers(path: Path) -> list[str]:
    data = _read(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("layers"), list):
        raise SensitiveLayersError(f"{path} is not a {FORMAT} file; write one with `structserve quant scan`")
    for i, name in enumerate(data["layers"]):
        if not isinstance(name, str) or not name:
            raise SensitiveLayersError(f"{path}: layers[{i}] is {name!r}, not a layer name")
    return list(fused_closure(data["layers"]))


def load_scores(path: Path) -> dict[str, dict[str, float]]:
    """The per-layer scores of a scan file (``{}`` when it has none)."""
    data = _read(path)
    scores = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores, dict):
        return {}
    for name, score in scores.items():
        if not isinstance(score, dict) or not all(_is_number(score.get(key)) for key in _SCORE_KEYS):
            raise SensitiveLayersError(f"{path}: scores[{name!r}] must hold numbers {', '.join(_SCORE_KEYS)}")
    return scores


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
) -> dict[str, str]:
    """The layers the rules flag (highest KL first), each with the rules it meets."""
    ranked = sorted(scores, key=lambda name: scores[name]["kl"], reverse=True)
    top = set(ranked[: max(1, math.ceil(len(ranked) * kl_top))]) if ranked and kl_top > 0 else set()
    flagged = {}
    for name in ranked:
        s = scores[name]
        rules = [
            f"KL {s['kl']:.1e} in the top {kl_top:.0%}" if name in top else "",
            f"KL {s['kl']:.1e} ≥ {kl_max:g}" if s["kl"] >= kl_max else "",
            f"R {s['dispersion']:.1f} ≥ {r_max:g}" if s["dispersion"] >= r_max else "",
            f"energy {s['energy']:.3f} > {energy_max:g}" if s["energy"] > energy_max else "",
        ]
        if any(rules):
            flagged[name] = ", ".join(rule for rule in rules if rule)
    return flagged


def online_flags(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The closed loop: each checkpoint layer of a module the online monitor switched to high
    precision (``fallback`` events of ``quant.monitor.events_path``) -> why, for ``fallback``."""
    seen: dict[str, list[Mapping[str, Any]]] = {}
    for event in events:
        if event.get("kind") == "fallback":
            for layer in event.get("layers", []):
                seen.setdefault(str(layer), []).append(event)
    return {
        layer: (
            f"online fallback ×{len(hits)}: outlier rate {max(float(e['rate']) for e in hits):.1%} "
            f"over {hits[-1]['window_tokens']} tokens, last {hits[-1]['time']}"
        )
        for layer, hits in seen.items()
    }


def fallback(
    scores: dict[str, dict[str, float]], thresholds: dict[str, float], events: Iterable[Mapping[str, Any]] = ()
) -> dict[str, str]:
    """The fallback list: every layer kept in high precision (flagged by the rules or by the
    online monitor's recorded ``events``, closed over fused modules) -> why (``policy.keep_reasons``)."""
    flagged = select(scores, **thresholds)
    for layer, why in online_flags(events).items():
        flagged[layer] = f"{flagged[layer]}; {why}" if layer in flagged else why
    return keep_reasons(flagged)


def write(
    path: Path,
    model: str,
    scheme: str,
    scores: dict[str, dict[str, float]],
    reasons: dict[str, str],
    thresholds: dict[str, float],
) -> None:
    """``reasons``: the fallback, layer -> why it is kept (``fallback``), closed over fused modules."""
    if list(reasons) != list(fused_closure(reasons)):
        raise SensitiveLayersError("the fallback list must hold every shard of a kept fused module (use fallback())")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "model": model,
                "scheme": scheme,
                "layers": list(reasons),
                "reasons": reasons,
                "thresholds": thresholds,
                "scores": scores,
            },
            indent=1,
        )
    )


def markdown(scores: dict[str, dict[str, float]], reasons: dict[str, str]) -> str:
    """A table of every layer's scores and why it is kept (empty: quantized), highest KL first."""
    rows = ["| layer | KL | dispersion R | energy σ₁/Σσ | kept because |", "|---|---:|---:|---:|---|"]
    for name in sorted(scores, key=lambda n: scores[n]["kl"], reverse=True):
        s = scores[name]
        rows.append(f"| {name} | {s['kl']:.2e} | {s['dispersion']:.1f} | {s['energy']:.4f} | {reasons.get(name, '')} |")
    return "\n".join(rows) + "\n"

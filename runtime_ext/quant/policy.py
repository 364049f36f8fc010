"""Which linear layers a scheme quantizes (pure logic: no torch, no sglang).

The service passes ``QuantPolicy`` to SGLang's scheduler in ``RuntimeExtConfig.quant_policy`` (as JSON).
Layer names are the checkpoint's (HF) names without ``.weight``: ``model.layers.3.self_attn.q_proj``.
SGLang builds fused modules (``qkv_proj`` from q/k/v, ``gate_up_proj`` from gate/up) and a fused
module has one scheme, so keeping one shard keeps them all. That rule lives here once:
``QuantPolicy`` stores ``keep`` (the ignore list plus the sensitive layers) closed over fused
modules (``fused_closure``), so every consumer (serving, the offline fake-quantized model,
``quant scan``, ``quant export``) sees the same set of layers; ``keep_reasons`` says why each
kept layer is kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Iterable, Literal, Mapping, get_args

Scheme = Literal["w8a8_dynamic", "w8a16", "w4a16"]
SCHEMES: tuple[Scheme, ...] = get_args(Scheme)
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
LINEAR_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GROUP_SIZES = (32, 64, 128, 256)


class QuantPolicyError(ValueError):
    """A quantization setting that cannot be applied (names what to change)."""


@dataclass(frozen=True)
class QuantPolicy:
    scheme: Scheme
    group_size: int = 128
    stage_aware: bool = False  # W8A8: decode reads a bf16 copy made at load, prefill the INT8 matmul
    keep: tuple[str, ...] = field(default_factory=tuple)  # layers kept in high precision (closed over fused modules)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keep", fused_closure(self.keep))
        if self.scheme not in SCHEMES:
            raise QuantPolicyError(f"unknown quantization scheme {self.scheme!r}; valid: none, {', '.join(SCHEMES)}")
        if self.group_size not in GROUP_SIZES:
            raise QuantPolicyError(f"unsupported group size {self.group_size}; valid: {list(GROUP_SIZES)}")

    @property
    def bits(self) -> int:
        return 4 if self.scheme == "w4a16" else 8

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "QuantPolicy":
        data = json.loads(text)
        return cls(**{**data, "keep": tuple(data.get("keep", ()))})


def shards(prefix: str) -> list[str]:
    """The checkpoint layer names behind an SGLang module prefix (fused modules expand)."""
    head, _, last = prefix.rpartition(".")
    return [f"{head}.{name}" for name in FUSED[last]] if last in FUSED else [prefix]


def fused_module(layer: str) -> tuple[str, list[str]]:
    """The SGLang module a checkpoint layer belongs to and all of that module's shards
    (``...q_proj`` -> ``(...qkv_proj, [...q_proj, ...k_proj, ...v_proj])``; unfused: itself)."""
    head, _, last = layer.rpartition(".")
    for module, parts in FUSED.items():
        if last in parts:
            return f"{head}.{module}", [f"{head}.{part}" for part in parts]
    return layer, [layer]


def fused_closure(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` plus every shard of each fused module any of whose shards is listed (first-seen order)."""
    return tuple(dict.fromkeys(shard for name in names for shard in fused_module(name)[1]))


def keep_reasons(flagged: Mapping[str, str]) -> dict[str, str]:
    """Every layer ``fused_closure`` keeps for the ``flagged`` layers (name -> why flagged), with
    the reason: its own, or the flagged shards of its fused module
    (``k_proj: fused with q_proj in qkv_proj; q_proj flagged (KL 7.1e-02)``)."""
    out: dict[str, str] = {}
    for layer in fused_closure(flagged):
        if layer in flagged:
            out[layer] = flagged[layer]
            continue
        module, parts = fused_module(layer)
        why = "; ".join(f"{_short(p)} flagged ({flagged[p]})" for p in parts if p in flagged)
        out[layer] = f"fused with {', '.join(_short(p) for p in parts if p in flagged)} in {_short(module)}; {why}"
    return out


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def keeps_high_precision(prefix: str, policy: QuantPolicy) -> bool:
    return any(name in policy.keep for name in shards(prefix))


def check_keep(keep: list[str], linear_names: set[str]) -> None:
    """Every kept name must be a linear layer of the model (``QuantPolicyError`` naming the first that is not)."""
    for name in keep:
        if name not in linear_names:
            close = sorted(n for n in linear_names if n.endswith(name.rpartition(".")[2]))[:3]
            raise QuantPolicyError(
                f"layer {name!r} (quantization ignore list / sensitive_layers) is not a linear "
                f"layer of this model; names look like {close or sorted(linear_names)[:3]}"
            )


def linear_layer_names(weight_names: list[str]) -> set[str]:
    """Quantizable linear layers among a checkpoint's tensor names."""
    pattern = re.compile(r"^(.*\.(?:%s))\.weight$" % "|".join(LINEAR_SUFFIXES))
    return {m.group(1) for name in weight_names if (m := pattern.match(name))}

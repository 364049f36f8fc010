"""Which linear layers a scheme quantizes (pure logic: no torch, no sglang).

The service passes ``QuantPolicy`` to SGLang's scheduler in ``RuntimeExtConfig.quant_policy`` (as JSON).
Layer names are the checkpoint's (HF) names without ``.weight``: ``model.layers.3.self_attn.q_proj``.
SGLang builds fused modules (``qkv_proj`` from q/k/v, ``gate_up_proj`` from gate/up); a fused
module always has one scheme, so it stays high precision when *any* of its shards is listed
in ``keep`` (the ignore list plus the sensitive layers).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

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
    keep: tuple[str, ...] = field(default_factory=tuple)  # layers kept in high precision

    def __post_init__(self) -> None:
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

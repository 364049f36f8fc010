"""What the server serves, fixed at startup: the model's tool-call and reasoning formats
(``ModelFormats``, ``ReasoningSetup``) and its limits (``ServingLimits``, ``ReasoningPolicy``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime_ext.formats import ReasoningFormat, ToolFormat
from service.output_text import OutputText
from service.types.plan import ReasoningPlan


class ReasoningMarkerError(ValueError):
    """A format's end marker is not one token of the serving tokenizer (startup error)."""


@dataclass(frozen=True)
class ReasoningSetup:
    """A reasoning format resolved against the serving tokenizer (built at startup)."""

    fmt: ReasoningFormat
    end_id: int
    forced_ids: tuple[int, ...]
    separator_ids: tuple[int, ...]

    @classmethod
    def build(cls, fmt: ReasoningFormat, encode: Callable[[str], list[int]]) -> ReasoningSetup:
        for marker in (fmt.start, fmt.end) if fmt.start_is_token else (fmt.end,):
            ids = encode(marker)
            if len(ids) != 1:
                raise ReasoningMarkerError(
                    f"reasoning format {fmt.name!r}: marker {marker!r} is {len(ids)} tokens {ids} in this "
                    "tokenizer, not one; set reasoning.format to one whose markers are single tokens (or none)"
                )
        return cls(fmt, encode(fmt.end)[0], tuple(encode(fmt.forced_end)), tuple(encode(fmt.separator)))

    def plan(self, budget: int | None) -> ReasoningPlan:
        return ReasoningPlan(budget, self.end_id, self.fmt.end, self.forced_ids, self.separator_ids)


@dataclass(frozen=True)
class ModelFormats:
    """The served model's tool-call and reasoning formats (chosen at startup)."""

    tools: ToolFormat | None = None
    reasoning: ReasoningSetup | None = None
    output: OutputText = OutputText()  # special tokens kept / stripped, content framed by headers


@dataclass(frozen=True)
class ReasoningPolicy:
    """What the server allows for reasoning (from config and the model's format)."""

    default_thinking: bool
    effort_budgets: tuple[tuple[str, int | None], ...]


@dataclass(frozen=True)
class ServingLimits:
    """What the loaded model and config allow (known once the engine is up)."""

    served_model_name: str
    context_length: int
    max_n: int
    default_max_tokens: int | None
    reasoning: ReasoningPolicy | None = None  # None: the model has no reasoning format
    vocab_size: int | None = None  # prompt token ids must be below it
    kv_pool: tuple[int, int] | None = None  # the KV pool's (tokens, page size), when known
    disaggregation: str | None = None  # "prefill" | "decode": one side of PD (requests carry bootstrap_*)

"""What the engine is asked to run (prompt and plan stages): sampling, the decode constraint,
the reasoning plan, the prefill/decode transfer, ``GenerationPlan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from grammars.errors import Unsupported

ConstraintKind = Literal["json_schema", "structural_tag", "ebnf", "regex"]  # an SGLang sampling param


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop_token_ids: tuple[int, ...] = ()
    top_k: int = -1  # -1: all tokens
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    skip_special_tokens: bool = True  # false: the formats' markers are special tokens (service.output_text)


@dataclass(frozen=True)
class Bootstrap:
    """A request's side of a prefill/decode transfer, as the PD gateway sent it: the prefill
    replica's host and bootstrap port, and the transfer's id (the same on both replicas)."""

    host: str
    port: int
    room: int


@dataclass(frozen=True)
class DecodeConstraint:
    """What the grammar enforces (constraints stage) and what the output is checked against."""

    kind: ConstraintKind
    value: str
    validate_schema: dict[str, Any] | bool | None = None  # post-validation (the original schema)
    loosened: tuple[str, ...] = ()  # "keyword at /pointer" dropped from the grammar
    ignored: tuple[str, ...] = ()  # "keyword at /pointer": unknown keywords (annotations), ignored
    # the service loosened it on its own (not the client's allow_schema_loosening): an output that
    # still fails validation after resampling is an error, never returned (pipeline/resample.py)
    must_validate: bool = False
    param: str | None = None  # the request field it came from, for error messages
    # (request field, canonical JSON schema) of each schema inside a combined grammar, to
    # name the culprit when the whole fails to compile
    parts: tuple[tuple[str, str], ...] = ()
    # keywords xgrammar cannot enforce: served only if llguidance's own JSON Schema compiler
    # takes the schema (the grammar check), else the policy's 400
    unenforced: tuple[Unsupported, ...] = ()
    # what to serve when llguidance refuses it too: the grammar without those keywords, every
    # output validated and resampled (must_validate); None: the 400, ``hint`` added to it
    fallback: DecodeConstraint | None = None
    hint: str = ""


@dataclass(frozen=True)
class PromptIds:
    """The rendered prompt (prompt stage)."""

    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class ReasoningPlan:
    """How to run a thinking turn: the reasoning phase stops at ``end_id`` or after
    ``budget`` tokens; then ``forced_ids`` (end marker + separator, when the budget ran
    out) or ``separator_ids`` (after a natural end) are appended and the answer phase
    runs with the plan's constraint. Token ids come from the serving tokenizer."""

    budget: int | None
    end_id: int
    end_text: str
    forced_ids: tuple[int, ...]
    separator_ids: tuple[int, ...]


@dataclass(frozen=True)
class GenerationPlan:
    """Everything the engine needs for one choice (plan stage)."""

    input_ids: tuple[int, ...]
    max_new_tokens: int
    sampling: SamplingOptions
    constraint: DecodeConstraint | None = None
    reasoning: ReasoningPlan | None = None
    logprobs: int | None = None  # None: none; k: the sampled token's logprob and the top k
    prompt_logprobs: bool = False  # also the prompt tokens' (the first has none)
    bootstrap: Bootstrap | None = None  # PD mode: the prefill/decode transfer (one engine request)

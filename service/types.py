"""Typed objects passed between the pipeline's stages, and the ports the pipeline is given
(engine, chat template, grammar check). Frozen: a stage never mutates its input.

The one module every stage (``service/pipeline/``) and every adapter behind a port
(``service/engine.py``, ``service/tokenizer.py``, ``service/grammar_check.py``) imports;
it imports no stage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from runtime_ext.formats import ReasoningFormat, ToolFormat
from service.output_text import OutputText
from service.protocol.openai import CustomToolCall, DeltaToolCall, SchemaValidation, ToolCall

Role = Literal["system", "user", "assistant", "tool"]
ToolMode = Literal["none", "auto", "required", "named"]
ConstraintKind = Literal["json_schema", "structural_tag", "ebnf", "regex"]  # an SGLang sampling param
PatternKind = Literal["regex", "choice", "grammar", "lark"]  # grammar: EBNF or Lark (detected); lark: Lark
Phase = Literal["reasoning", "answer"]


@dataclass(frozen=True)
class ToolCallRecord:
    """A tool call of an earlier assistant turn (``arguments``: JSON text of an object)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[ToolCallRecord, ...] = ()
    reasoning: str | None = None  # an earlier assistant turn's reasoning, for the chat template


@dataclass(frozen=True)
class PatternOutputSpec:
    """The client asked for text matching a regex, one of ``choices``, or a grammar
    (``text``: xgrammar EBNF or Lark); ``param`` is the request field it came from."""

    kind: PatternKind
    param: str
    text: str = ""
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolDef:
    """A function the client offers (``parameters`` None = no arguments). A ``custom`` tool
    (``kind``) takes text, shown to the model as one string parameter ``input``; ``grammar``
    is what that text must match (None: free text)."""

    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool
    kind: Literal["function", "custom"] = "function"
    grammar: PatternOutputSpec | None = None


@dataclass(frozen=True)
class ToolRequest:
    """The tools of a request and what the model may do with them this turn.

    ``mode``: "none" (answer in text), "auto" (text or calls), "required" (at least
    one call), "named" (exactly ``allowed[0]``). ``allowed``: the names callable
    this turn (all tools unless ``allowed_tools`` or a named choice narrowed them);
    every tool is still shown to the model. ``parallel`` False: at most one call.
    ``format``: the served model's tool-call format (a server without one refuses tools).
    """

    tools: tuple[ToolDef, ...]
    mode: ToolMode
    allowed: tuple[str, ...]
    parallel: bool
    format: ToolFormat

    def schema_of(self, name: str) -> dict[str, Any] | None:
        return next(t.parameters for t in self.tools if t.name == name)

    @property
    def custom_names(self) -> frozenset[str]:
        """The custom tools: their calls carry ``{"input": …}`` (docs/api.md)."""
        return frozenset(t.name for t in self.tools if t.kind == "custom")

    @property
    def forced_custom(self) -> ToolDef | None:
        """The custom tool a named ``tool_choice`` forces (its input is the whole answer)."""
        if self.mode != "named":
            return None
        return next((t for t in self.tools if t.name == self.allowed[0] and t.kind == "custom"), None)


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
class JsonOutputSpec:
    """The client asked for JSON output: ``schema`` None means any JSON object."""

    schema: dict[str, Any] | bool | None
    name: str | None
    param: str = "response_format.json_schema.schema"  # the request field, for error messages


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
class ReasoningRequest:
    """Thinking on/off and the exact budget (None = bounded by max_tokens only).
    ``from_effort``: the budget came from ``reasoning_effort`` (a hint: the plan stage clamps
    it to what max_tokens leaves for an answer) rather than an explicit ``max_reasoning_tokens``.
    ``setup``: the model's reasoning format (None only when none was given to validation)."""

    thinking: bool
    budget: int | None = None
    from_effort: bool = False
    setup: ReasoningSetup | None = None


@dataclass(frozen=True)
class ValidatedRequest:
    """A request that passed the protocol-level checks (validate stage)."""

    model: str
    messages: tuple[Message, ...]
    sampling: SamplingOptions
    max_tokens: int | None  # what the client asked for; None = as many as fit
    max_tokens_param: str  # "max_tokens" or "max_completion_tokens", for error messages
    n: int
    stream: bool
    include_usage: bool
    json_output: JsonOutputSpec | None = None
    pattern_output: PatternOutputSpec | None = None
    tools: ToolRequest | None = None
    allow_schema_loosening: bool | None = None  # None = the server-wide default
    reasoning: ReasoningRequest | None = None  # None: the model has no reasoning format
    template_kwargs: tuple[tuple[str, Any], ...] = ()  # chat_template_kwargs minus enable_thinking
    logprobs: int | None = None  # None: no logprobs; k: the sampled token's and the top k
    prompt_param: str = "messages"  # the field that holds the prompt, for error messages
    echo: bool = False  # completions: the prompt is part of the output (with its logprobs)
    bootstrap: Bootstrap | None = None  # PD mode: the transfer this request is one side of


@dataclass(frozen=True)
class Bootstrap:
    """A request's side of a prefill/decode transfer, as the PD gateway sent it: the prefill
    replica's host and bootstrap port, and the transfer's id (the same on both replicas)."""

    host: str
    port: int
    room: int


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


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's logprob (and the top alternatives at its position), as the
    engine computed it: after the grammar mask and temperature (docs/api.md)."""

    token: str
    token_bytes: tuple[int, ...]
    logprob: float | None  # None: the first prompt token (nothing precedes it)
    top: tuple[tuple[str, tuple[int, ...], float], ...] = ()  # (token, bytes, logprob), best first


@dataclass(frozen=True)
class EngineDelta:
    """One streamed increment from the engine; ``finish_reason`` set on the last one."""

    text: str
    completion_tokens: int  # cumulative
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str | None = None
    token_ids: tuple[int, ...] = ()  # the ids of this increment
    matched_stop: int | str | None = None  # the stop token id / string that ended it
    logprobs: tuple[TokenLogprob, ...] = ()  # of this increment's tokens (when asked for)
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # non-streamed, with GenerationPlan.prompt_logprobs


@dataclass(frozen=True)
class Piece:
    """One increment of a choice (generate stage): ``delta.completion_tokens`` counts the
    whole turn so far (reasoning + appended markers + answer)."""

    phase: Phase
    delta: EngineDelta
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class EngineOutput:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    logprobs: tuple[TokenLogprob, ...] = ()
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # with GenerationPlan.prompt_logprobs
    matched_stop: int | str | None = None  # the stop token id / string that ended it


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


@dataclass(frozen=True)
class ReasoningPolicy:
    """What the server allows for reasoning (from config and the model's format)."""

    default_thinking: bool
    effort_budgets: tuple[tuple[str, int | None], ...]


@dataclass(frozen=True)
class ChoiceEvent:
    """What one choice produced from a piece (choice stage), to send as a chunk."""

    content: str = ""
    tool_calls: tuple[DeltaToolCall, ...] = ()
    reasoning: str = ""
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass
class ChoiceResult:
    """The finished choice. ``content`` None when the model only called tools."""

    content: str | None
    tool_calls: list[ToolCall | CustomToolCall] | None
    finish_reason: str
    validation: SchemaValidation | None
    reasoning: str | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None  # answer tokens, when asked for
    stop: str | None = None  # the client's stop string that ended it (finish_reason "stop")


@dataclass(frozen=True)
class ChoiceStep:
    """A piece routed through a choice: the events to send, in order, and the result
    once the piece was the last one."""

    events: tuple[ChoiceEvent, ...] = ()
    result: ChoiceResult | None = None


@dataclass(frozen=True)
class FinishedChoice:
    """One choice done: what the client sees, the engine's token counts, reasoning tokens."""

    result: ChoiceResult
    counts: EngineDelta
    reasoning_tokens: int
    schema_attempts: int = 0  # generations run when the output was validated and resampled, else 0


class ChatTemplate(Protocol):
    """Renders messages into prompt token ids (implemented over the HF tokenizer).

    ``renders_tools``: the template writes the ``tools`` it is given (and assistant
    ``tool_calls`` and ``tool`` messages) itself; otherwise the prompt stage does.
    """

    renders_tools: bool

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDef] = (),
        suffix: str = "",
        kwargs: tuple[tuple[str, Any], ...] = (),
    ) -> list[int]: ...

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        """Each id's vocabulary entry as the tokenizer spells it (``convert_ids_to_tokens``)."""
        ...


class GrammarChecker(Protocol):
    """Compiles a constraint ahead of the engine (bounded time, cached) and returns the one
    to send (the same, or its llguidance form); raises grammars.errors.GrammarError
    subclasses for constraints that cannot be enforced."""

    async def ensure_compiles(self, constraint: DecodeConstraint) -> DecodeConstraint: ...


class EngineClient(Protocol):
    """The engine as the pipeline sees it (implemented by ``service.engine``)."""

    async def generate(self, plan: GenerationPlan, rid: str) -> EngineOutput: ...

    def stream(self, plan: GenerationPlan, rid: str) -> AsyncIterator[EngineDelta]: ...

    async def cache_prompt(self, plan: GenerationPlan, rid: str) -> int | None: ...

    async def abort(self, rid: str) -> None: ...

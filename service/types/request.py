"""The request as the validate stage passes it on: messages, tools, output specs, reasoning,
``ValidatedRequest``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runtime_ext.formats import ToolFormat
from service.types.plan import Bootstrap, SamplingOptions
from service.types.serving import ReasoningSetup

Role = Literal["system", "user", "assistant", "tool"]
ToolMode = Literal["none", "auto", "required", "named"]
PatternKind = Literal["regex", "choice", "grammar", "lark"]  # grammar: EBNF or Lark (detected); lark: Lark


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
    ``calls_before``: the tool calls the conversation's assistant messages already hold (a
    format that numbers calls in their ids, Kimi-K2's, counts on from there).
    """

    tools: tuple[ToolDef, ...]
    mode: ToolMode
    allowed: tuple[str, ...]
    parallel: bool
    format: ToolFormat
    calls_before: int = 0

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
class JsonOutputSpec:
    """The client asked for JSON output: ``schema`` None means any JSON object."""

    schema: dict[str, Any] | bool | None
    name: str | None
    param: str = "response_format.json_schema.schema"  # the request field, for error messages


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

"""The ports the pipeline is given: the chat template, the grammar check, the engine
(implemented by ``service/tokenizer.py``, ``service/grammar_check.py``, ``service/engine.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from service.types.plan import DecodeConstraint, GenerationPlan
from service.types.request import Message, ToolDef
from service.types.results import EngineDelta, EngineOutput


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

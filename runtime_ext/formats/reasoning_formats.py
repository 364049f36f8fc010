"""Reasoning (think-block) formats: one frozen spec per format, shared by the parser,
the prompt stage and the budget enforcement. Pure.

A reasoning block is ``start`` ... ``end`` at the beginning of the assistant turn,
followed by ``separator`` and the answer. ``start_in_template``: the chat template
already opens the block at the end of the prompt (DeepSeek-R1), so the model's
output begins inside the reasoning; otherwise the service writes ``start`` +
``opening`` after the generation prompt when thinking is on, so reasoning starts at
the first generated token in every case.

Harmony (gpt-oss) is written the same way: its ``analysis`` message is the block
(``<|channel|>analysis<|message|>`` ... ``<|end|>``), the service appends
``<|start|>assistant`` after it and the model picks the next channel; the ``final``
header that follows is dropped from the answer (``answer_headers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

_TEMPLATE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium"}
"""OpenAI efforts -> the three gpt-oss reads (``Reasoning: low|medium|high``); the rest are high."""


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    start: str
    end: str
    start_in_template: bool = False
    opening: str = "\n"  # written after ``start`` when the service opens the block
    separator: str = "\n\n"  # written after ``end`` before the answer
    end_prefix: str = "\n"  # written before ``end`` when the service closes the block
    answer_headers: tuple[str, ...] = ()  # texts dropped where the answer starts (after whitespace)
    start_is_token: bool = True  # ``start`` must be one token of the serving tokenizer
    template_switch: str = ""  # the template variable that opens (true) or closes (false) the block itself
    effort_variable: str = ""  # the template variable ``reasoning_effort`` is given to (low/medium/high)

    def effort_kwargs(self, effort: str | None) -> tuple[tuple[str, str], ...]:
        """``reasoning_effort`` as the template reads it (``effort_variable``; none/None: nothing)."""
        if not self.effort_variable or effort in (None, "none"):
            return ()
        return ((self.effort_variable, _TEMPLATE_EFFORT.get(str(effort), "high")),)

    def template_kwargs(self, thinking: bool) -> tuple[tuple[str, bool], ...]:
        """What the chat template is given to open or close the block (``template_switch``)."""
        return ((self.template_switch, thinking),) if self.template_switch else ()

    def prompt_suffix(self, thinking: bool) -> str:
        """Text appended after the generation prompt: an open block (thinking on) or an
        empty closed one (thinking off: the model answers at once). Nothing when the
        template does either itself (``template_switch``)."""
        if self.template_switch:
            return ""
        opened = "" if self.start_in_template else self.start + self.opening
        if thinking:
            return opened
        return opened + ("" if self.start_in_template else self.end_prefix) + self.end + self.separator

    @property
    def forced_end(self) -> str:
        """What the service appends when the budget is spent: ``end`` + ``separator``
        (after ``end_prefix``, a newline as models write it)."""
        return self.end_prefix + self.end + self.separator


class UnknownReasoningFormatError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return (
            f"unknown reasoning format {self.name!r}; valid: auto, none, "
            f"{', '.join(REASONING_FORMATS)} (or a start/end pair in config)"
        )


QWEN3 = ReasoningFormat("qwen3", "<think>", "</think>")
DEEPSEEK_R1 = ReasoningFormat("deepseek_r1", "<think>", "</think>", start_in_template=True)
DEEPSEEK_V31 = ReasoningFormat(
    "deepseek_v31", "<think>", "</think>", start_in_template=True, template_switch="thinking"
)
"""DeepSeek-V3.1: its template ends the prompt with ``<think>`` when ``thinking`` is true, else ``</think>``."""
DEEPSEEK_V32 = ReasoningFormat(
    "deepseek_v32", "<think>", "</think>", start_in_template=True, template_switch="enable_thinking"
)
"""DeepSeek-V3.2: the same, the template's variable being ``enable_thinking`` (default true)."""
HARMONY = ReasoningFormat(
    "harmony",
    "<|channel|>analysis<|message|>",
    "<|end|>",
    opening="",
    separator="<|start|>assistant",
    end_prefix="",
    answer_headers=("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"),
    start_is_token=False,
    effort_variable="reasoning_effort",
)

REASONING_FORMATS: Mapping[str, ReasoningFormat] = MappingProxyType(
    {f.name: f for f in (QWEN3, DEEPSEEK_R1, DEEPSEEK_V31, DEEPSEEK_V32, HARMONY)}
)
"""Registered reasoning formats by name (which model family uses which: ``formats.families``)."""


def get_reasoning_format(name: str) -> ReasoningFormat:
    """The reasoning format registered as ``name``; :class:`UnknownReasoningFormatError` otherwise."""
    try:
        return REASONING_FORMATS[name]
    except KeyError:
        raise UnknownReasoningFormatError(name) from None


def generic_reasoning_format(start: str | None, end: str | None) -> ReasoningFormat:
    """The ``generic`` format: the configured ``start``/``end`` markers (both required)."""
    if not start or not end:
        raise ValueError("reasoning.format 'generic' needs reasoning.start and reasoning.end markers")
    return ReasoningFormat("generic", start, end)

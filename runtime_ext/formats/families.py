"""Model families: the one record per family of what the service must know about it. Pure.

A :class:`ModelFamily` names the ``config.json`` ``model_type`` values it covers, the
tool-call format its chat template teaches, the reasoning format it writes (None:
it does not reason), the template variables that switch thinking and set the effort,
and the texts of its end-of-turn tokens. Adding a family is one record in
:data:`MODEL_FAMILIES`; the format selection below and the lookups derived from it
read nothing else. Configuration overrides both choices (``tool_format``,
``reasoning.format``: a registered name instead of ``auto``).

Template facts: whether a template renders ``tools`` is probed from the template
itself (``formats.templates``), and whether it opens the think block is a property
of the family's reasoning format (``ReasoningFormat.start_in_template``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from runtime_ext.formats.reasoning_formats import (
    DEEPSEEK_R1,
    QWEN3,
    ReasoningFormat,
    generic_reasoning_format,
    get_reasoning_format,
)
from runtime_ext.formats.reasoning_formats import DEEPSEEK_V31 as DEEPSEEK_V31_THINKING
from runtime_ext.formats.reasoning_formats import DEEPSEEK_V32 as DEEPSEEK_V32_THINKING
from runtime_ext.formats.reasoning_formats import HARMONY as HARMONY_REASONING
from runtime_ext.formats.spec import ToolFormat
from runtime_ext.formats.tool_formats import (
    DEEPSEEK_V3,
    DEEPSEEK_V31,
    DEEPSEEK_V32,
    FORMAT_NAMES,
    GENERIC,
    GLM45,
    HARMONY,
    KIMI_K2,
    LLAMA3,
    MISTRAL,
    QWEN,
    QWEN3_CODER,
    get_format,
)

AUTO: Final = "auto"
"""Config value: choose the format from the model family."""
REASONING_NONE: Final = "none"
"""Config value (reasoning): the model does not reason."""
REASONING_GENERIC: Final = "generic"
"""Config value (reasoning): the configured start/end markers."""


@dataclass(frozen=True)
class ModelFamily:
    """One model family.

    name: a label for logs and docs.
    model_types: the ``config.json`` ``model_type`` values of this family.
    tool_format: the format of calls when the chat template renders tools (a
        template that does not gets ``generic``, taught in the system prompt).
    reasoning: the think-block format under ``reasoning.format: auto`` (None: none).
    template_markers: texts whose presence (all of them) in the chat template selects
        this family's tool format whatever the ``model_type`` (Qwen3-Coder shares
        ``qwen3_moe`` with Qwen3 but its template teaches ``<function=...>``); a family
        so chosen also chooses the reasoning format when it has one.
    thinking_switch: the chat-template variable that turns thinking on/off (None: the
        template has none). The service passes it only to a template that opens or
        closes the block itself (``ReasoningFormat.template_switch``); otherwise it
        writes the opened or empty block after the generation prompt.
    effort_variable: the chat-template variable that reads the reasoning effort
        (gpt-oss ``reasoning_effort``: low/medium/high).
    end_of_turn: the texts of the tokens that end an assistant turn (EOS ids are
        these tokens' ids in the family's tokenizer).
    """

    name: str
    model_types: tuple[str, ...]
    tool_format: ToolFormat
    reasoning: ReasoningFormat | None = None
    template_markers: tuple[str, ...] = ()
    thinking_switch: str | None = None
    effort_variable: str | None = None
    end_of_turn: tuple[str, ...] = ()


_DS_EOS = ("<\uff5cend\u2581of\u2581sentence\uff5c>",)
MODEL_FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily("qwen2", ("qwen2", "qwen2_moe"), QWEN, end_of_turn=("<|im_end|>", "<|endoftext|>")),
    ModelFamily(
        "qwen3", ("qwen3", "qwen3_moe"), QWEN, QWEN3, thinking_switch="enable_thinking", end_of_turn=("<|im_end|>",)
    ),
    ModelFamily("llama3", ("llama",), LLAMA3, end_of_turn=("<|eot_id|>", "<|eom_id|>")),
    ModelFamily("mistral", ("mistral", "mixtral"), MISTRAL, end_of_turn=("</s>",)),
    ModelFamily("deepseek_v3", ("deepseek_v3",), DEEPSEEK_V3, DEEPSEEK_R1, end_of_turn=_DS_EOS),
    ModelFamily(
        "deepseek_v32",
        ("deepseek_v32",),
        DEEPSEEK_V32,
        DEEPSEEK_V32_THINKING,
        template_markers=("\uff5cDSML\uff5c",),
        thinking_switch="enable_thinking",
        end_of_turn=_DS_EOS,
    ),
    ModelFamily(
        "deepseek_v31",  # model_type deepseek_v3 like V3; told apart by how its template writes a call
        (),
        DEEPSEEK_V31,
        DEEPSEEK_V31_THINKING,
        template_markers=("<\uff5ctool\u2581sep\uff5c>' + tool['function']['arguments']",),
        thinking_switch="thinking",
        end_of_turn=_DS_EOS,
    ),
    ModelFamily(
        "qwen3_coder", (), QWEN3_CODER, template_markers=("<function=", "<parameter="), end_of_turn=("<|im_end|>",)
    ),
    ModelFamily(
        "qwen3_5",
        ("qwen3_5", "qwen3_5_moe"),
        QWEN3_CODER,
        QWEN3,
        thinking_switch="enable_thinking",
        end_of_turn=("<|im_end|>",),
    ),
    ModelFamily(
        "glm45",
        ("glm4_moe",),
        GLM45,
        QWEN3,
        template_markers=("<arg_key>", "<arg_value>"),
        thinking_switch="enable_thinking",
        end_of_turn=("<|user|>", "<|observation|>", "<|endoftext|>"),
    ),
    ModelFamily(
        "kimi_k2",
        ("kimi_k2",),
        KIMI_K2,
        QWEN3,  # K2-Thinking's <think>...</think>; its template has no switch, the service opens the block
        template_markers=("<|tool_calls_section_begin|>", "<|tool_call_argument_begin|>"),
        end_of_turn=("<|im_end|>",),
    ),
    ModelFamily(
        "gpt_oss",
        ("gpt_oss",),
        HARMONY,
        HARMONY_REASONING,
        template_markers=("<|channel|>", "to=functions."),
        effort_variable="reasoning_effort",
        end_of_turn=("<|return|>", "<|call|>"),
    ),
)


def by_model_type(families: Iterable[ModelFamily]) -> Mapping[str, ModelFamily]:
    """Each family under each of its model types; ValueError when a type is in two."""
    index: dict[str, ModelFamily] = {}
    for family in families:
        for model_type in family.model_types:
            if model_type in index:
                raise ValueError(f"model_type {model_type!r} is in two families")
            index[model_type] = family
    return MappingProxyType(index)


_FAMILY_BY_MODEL_TYPE: Mapping[str, ModelFamily] = by_model_type(MODEL_FAMILIES)
TOOL_FORMAT_BY_MODEL_TYPE: Mapping[str, str] = MappingProxyType(
    {t: f.tool_format.name for t, f in _FAMILY_BY_MODEL_TYPE.items()}
)
"""``model_type`` -> tool-call format name, for templates that render tools (derived)."""
REASONING_BY_MODEL_TYPE: Mapping[str, str] = MappingProxyType(
    {t: f.reasoning.name for t, f in _FAMILY_BY_MODEL_TYPE.items() if f.reasoning is not None}
)
"""``model_type`` -> reasoning format name, for the families that reason (derived)."""


class ToolFormatSelectionError(ValueError):
    """``tool_format: auto`` cannot tell the format; the message says what to set."""


def family_by_template(chat_template: object) -> ModelFamily | None:
    """The family whose ``template_markers`` all appear in ``chat_template`` (a string)."""
    if not isinstance(chat_template, str):
        return None
    for family in MODEL_FAMILIES:
        if family.template_markers and all(m in chat_template for m in family.template_markers):
            return family
    return None


def select_format(
    configured: str, model_type: str | None, template_renders_tools: bool, chat_template: object = None
) -> ToolFormat:
    """The format to serve with. ``configured``: ``auto`` or a registered name
    (raises ``UnknownFormatError`` for others). Under ``auto``, a template that renders
    tools is matched by its markers first (``ModelFamily.template_markers``), then by
    ``model_type``."""
    if configured != AUTO:
        return get_format(configured)
    if not template_renders_tools:
        return GENERIC
    by_template = family_by_template(chat_template)
    if by_template is not None:
        return by_template.tool_format
    name = TOOL_FORMAT_BY_MODEL_TYPE.get(model_type or "")
    if name is None:
        raise ToolFormatSelectionError(
            f"the chat template renders tools but the tool-call format of model_type "
            f"{model_type!r} is unknown; set tool_format (STRUCTSERVE_TOOL_FORMAT) to one of: "
            f"{', '.join(FORMAT_NAMES)}"
        )
    return get_format(name)


def select_family(model_type: str | None, chat_template: object = None) -> ModelFamily | None:
    """The model's family: by its template's markers, else by ``model_type`` (None: unknown)."""
    return family_by_template(chat_template) or _FAMILY_BY_MODEL_TYPE.get(model_type or "")


def select_reasoning_format(
    configured: str,
    model_type: str | None,
    start: str | None = None,
    end: str | None = None,
    chat_template: object = None,
) -> ReasoningFormat | None:
    """``configured``: ``auto`` (by model family; None when the family does not reason),
    ``none``, ``generic`` (``start``/``end`` required) or a registered name. Under
    ``auto`` a family chosen by its template markers decides: its own format when it reasons;
    when it does not, the ``model_type``'s family only if that family writes the same tool calls
    (Qwen3.5, ``qwen3_5``, thinks in Qwen3-Coder's call format; Qwen3-Coder itself, a
    ``qwen3_moe`` whose template teaches XML calls, never opens a think block)."""
    if configured == REASONING_NONE:
        return None
    if configured == AUTO:
        by_template = family_by_template(chat_template)
        if by_template is not None and by_template.reasoning is not None:
            return by_template.reasoning
        by_type = _FAMILY_BY_MODEL_TYPE.get(model_type or "")
        if by_type is None or (by_template is not None and by_type.tool_format != by_template.tool_format):
            return None
        return by_type.reasoning
    if configured == REASONING_GENERIC:
        return generic_reasoning_format(start, end)
    return get_reasoning_format(configured)

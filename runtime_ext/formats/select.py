"""Which tool-call format a served model uses (config ``tool_format``).

``auto`` decides from the model family (``config.json`` ``model_type``) and from
whether the chat template renders tools at all: a template without a tools
section (SmolLM2) gets the ``generic`` format, whose syntax the service teaches
in the system prompt. Pure.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from runtime_ext.formats.registry import FORMAT_NAMES, GENERIC, get_format
from runtime_ext.formats.spec import ToolFormat

FAMILY_FORMATS: Mapping[str, str] = MappingProxyType({
    "qwen2": "qwen", "qwen2_moe": "qwen", "qwen3": "qwen", "qwen3_moe": "qwen",
    "llama": "llama3", "mistral": "mistral", "mixtral": "mistral",
    "deepseek_v3": "deepseek_v3", "deepseek_v32": "deepseek_v3",
})
"""``model_type`` -> format, for models whose chat template renders tools."""


class ToolFormatSelectionError(ValueError):
    """``tool_format: auto`` cannot tell the format; the message says what to set."""


def select_format(configured: str, model_type: str | None, template_renders_tools: bool) -> ToolFormat:
    """The format to serve with. ``configured``: ``auto`` or a registered name
    (raises ``UnknownFormatError`` for others)."""
    if configured != "auto":
        return get_format(configured)
    if not template_renders_tools:
        return GENERIC
    name = FAMILY_FORMATS.get(model_type or "")
    if name is None:
        raise ToolFormatSelectionError(
            f"the chat template renders tools but the tool-call format of model_type "
            f"{model_type!r} is unknown; set tool_format (STRUCTSERVE_TOOL_FORMAT) to one of: "
            f"{', '.join(FORMAT_NAMES)}"
        )
    return get_format(name)

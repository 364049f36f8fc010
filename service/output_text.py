"""What of the engine's output text reaches the parsers and the client, decided once at startup
from the served tokenizer and the model's formats.

SGLang decodes with ``skip_special_tokens`` on by default. When a marker of the tool-call or
reasoning format is (or holds) a special token of the tokenizer (gpt-oss Harmony's
``<|channel|>``, ``<|message|>``, ``<|end|>``, ...), that would drop the marker before the
parsers see it: the engine request then asks for special tokens, and the special tokens that
are no marker of the formats (EOS, padding, reserved tokens) are stripped from the text
instead, so the client never sees them. A format whose content is framed by message headers
(Harmony) sends content through its parser even without tools, which drops the headers.
Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from enum import Enum

from runtime_ext.formats import CallStyle, ReasoningFormat, ToolFormat


@dataclass(frozen=True)
class OutputText:
    """``keep_special``: the engine request sets ``skip_special_tokens`` false. ``strip``: the
    special tokens removed from the output text (those no format marker holds).
    ``content_format``: the tool format that frames content (parsed even without tools).
    ``kept``: the special tokens kept for the parsers (format markers); the reasoning the client
    gets holds none of them (``clean_reasoning``): what is left of one after the reasoning parser
    took its markers is a control token the model wrote inside its thoughts (a random gpt-oss
    writes ``<|message|>`` there), not text."""

    keep_special: bool = False
    strip: tuple[str, ...] = ()
    content_format: ToolFormat | None = None
    kept: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern", _alternation(self.strip))
        object.__setattr__(self, "_reasoning_pattern", _alternation(self.strip + self.kept))

    def clean(self, text: str) -> str:
        """``text`` without the stripped special tokens (a special token is decoded whole)."""
        return _without(getattr(self, "_pattern"), text)

    def clean_reasoning(self, text: str) -> str:
        """Reasoning text without any special token (stripped or kept)."""
        return _without(getattr(self, "_reasoning_pattern"), text)


def _alternation(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    ordered = sorted(tokens, key=len, reverse=True)  # a longer token first where one holds another
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _without(pattern: re.Pattern[str] | None, text: str) -> str:
    return text if pattern is None or not text else pattern.sub("", text)


_NOT_MARKERS = frozenset({"name", "description", "template_switch", "effort_variable"})


def format_markers(*formats: ToolFormat | ReasoningFormat | None) -> tuple[str, ...]:
    """Every marker text of the formats (their non-empty string fields, headers included)."""
    found: list[str] = []
    for fmt in formats:
        if fmt is None:
            continue
        for f in fields(fmt):
            value = getattr(fmt, f.name)
            values = value if isinstance(value, tuple) else (value,)
            found += [
                v for v in values if isinstance(v, str) and not isinstance(v, Enum) and v and f.name not in _NOT_MARKERS
            ]
    return tuple(found)


def output_text(
    special_tokens: Iterable[str], tools: ToolFormat | None, reasoning: ReasoningFormat | None
) -> OutputText:
    """The decision for a tokenizer whose special tokens are ``special_tokens``."""
    markers = format_markers(tools, reasoning)
    special = sorted({t for t in special_tokens if t})
    in_markers = {t for t in special if any(t in m for m in markers)}
    if not in_markers:
        return OutputText()
    frames = tools if tools is not None and tools.style is CallStyle.HARMONY else None
    return OutputText(True, tuple(t for t in special if t not in in_markers), frames, tuple(sorted(in_markers)))


def special_tokens_of(added_tokens: Iterable[object]) -> tuple[str, ...]:
    """The texts of the added tokens marked special (``added_tokens_decoder.values()`` of a
    transformers or ``tokenizers`` tokenizer): what ``skip_special_tokens`` drops."""
    return tuple(str(getattr(t, "content")) for t in added_tokens if getattr(t, "special", False))

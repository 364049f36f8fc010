"""The frozen description of one tool-call family (markers, envelope, separators).

Pure: imports neither torch, sglang, fastapi nor xgrammar. Parsers
(``runtime_ext.parsers``), grammars (``grammars.tool_calls.constraint``) and prompt rendering
all read the same :class:`ToolFormat`, so the text a grammar forces is exactly the
text the parser expects.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum


class CallStyle(str, Enum):
    """How calls are laid out in the model's output.

    - ``TAGGED``: every call is ``call_start ENVELOPE call_end``; calls may appear
      anywhere in the text, text may sit between them (qwen/hermes, generic).
    - ``JSON_SEQUENCE``: an optional ``call_start``, then JSON envelopes separated
      by ``separator`` (llama3: ``<|python_tag|>`` and ``;``).
    - ``JSON_ARRAY``: ``call_start`` then one JSON array of envelopes (mistral).
    - ``NAMED_BLOCKS``: ``section_start``, then per call
      ``call_start NAME name_end ARGS arguments_end call_end``, then
      ``section_end`` (deepseek_v3).
    - ``PYTHONIC``: a Python list of calls ``[f(a=1), g()]`` with literal
      keyword arguments.
    - ``XML_PARAMS``: per call ``call_start NAME name_end``, then per argument
      ``key_start KEY key_end VALUE value_end``, then ``call_end``; a VALUE is raw
      text, read as the type its parameter's schema declares (Qwen3-Coder, GLM-4.5).
    - ``HARMONY``: gpt-oss messages ``<|channel|>CHANNEL<|message|>BODY<|end|>``; a
      call is ``call_start NAME name_end ARGS call_end`` (the commentary channel
      addressed ``to=functions.NAME``), other messages' bodies are content and their
      headers and end markers are dropped (``parsers.harmony``).
    """

    TAGGED = "tagged"
    JSON_SEQUENCE = "json_sequence"
    JSON_ARRAY = "json_array"
    NAMED_BLOCKS = "named_blocks"
    PYTHONIC = "pythonic"
    XML_PARAMS = "xml_params"
    HARMONY = "harmony"


@dataclass(frozen=True)
class ToolFormat:
    """One tool-call family. Every string is matched exactly by the parsers.

    Fields:
        name: registry name (``get_format(name)``).
        style: the layout, see :class:`CallStyle`.
        call_start: marker opening one call (TAGGED, NAMED_BLOCKS) or the group of
            calls (JSON_SEQUENCE: optional ``<|python_tag|>``; JSON_ARRAY:
            ``[TOOL_CALLS]``; PYTHONIC: ``""``, the list starts with ``[``).
        call_end: marker closing one call (TAGGED, NAMED_BLOCKS), else ``""``.
        separator: canonical text between two consecutive calls. The parser
            accepts any whitespace around its non-space part.
        padding: whitespace written just inside ``call_start``/``call_end`` when
            rendering (qwen writes ``<tool_call>\\n{...}\\n</tool_call>``; NAMED_BLOCKS:
            inside ``section_start``/``section_end``); the parser accepts any whitespace there.
        section_start / section_end: NAMED_BLOCKS only: markers around all calls.
        name_key: JSON key of the function name in an envelope.
        arguments_key: JSON key of the arguments object written when rendering.
        arguments_aliases: other keys the parser accepts for the arguments.
        bare_calls: the parser also accepts calls written without ``call_start``,
            but only at the very start of the output (after whitespace) or right
            after a previous call (real Qwen2.5 emits bare JSON; Llama 3.x emits
            JSON without ``<|python_tag|>``; pythonic lists have no marker).
        name_end: NAMED_BLOCKS, XML_PARAMS, HARMONY: text that ends the function name.
        index_sep: NAMED_BLOCKS only: the name is followed by this text and a call
            counter (Kimi-K2 writes ``functions.NAME:0``); the counter is not part of
            the name (rendered as the call's position, any digits parsed).
        arguments_end: NAMED_BLOCKS only: text after the arguments object.
        key_start / key_end / value_end: XML_PARAMS only: the text before an
            argument's name, between its name and its value, and after its value.
            The parser matches their non-space parts with any whitespace around
            them, except that a value keeps its own whitespace less one newline
            at each end.
        json_separators: (item, key) separators of the canonical JSON envelope,
            matching SGLang's JSON with ``constrained_json_disable_any_whitespace``
            (xgrammar ``any_whitespace=False`` writes ``", "`` and ``": "``).
        description: one line for docs and errors.
        call_id: how the service names a call the model made (``{name}``, ``{number}``: the
            call's number in the conversation, from 0): Kimi-K2's template renders a call's
            id into the history as its ``functions.NAME:IDX``, so the id must be that text (as
            SGLang names them). Empty: ``call_`` and 24 hex digits.
    """

    name: str
    style: CallStyle
    call_start: str
    call_end: str = ""
    separator: str = ""
    padding: str = ""
    section_start: str = ""
    section_end: str = ""
    name_key: str = "name"
    arguments_key: str = "arguments"
    arguments_aliases: tuple[str, ...] = ()
    bare_calls: bool = False
    name_end: str = ""
    index_sep: str = ""
    arguments_end: str = ""
    key_start: str = ""
    key_end: str = ""
    value_end: str = ""
    json_separators: tuple[str, str] = (", ", ": ")
    description: str = ""
    call_id: str = ""

    def make_call_id(self, name: str, number: int) -> str:
        """The id of the model's call ``name``, the ``number``-th call of the conversation."""
        if self.call_id:
            return self.call_id.format(name=name, number=number)
        return f"call_{uuid.uuid4().hex[:24]}"

    @property
    def arguments_keys(self) -> tuple[str, ...]:
        """Every key the parser accepts for the arguments (canonical first)."""
        return (self.arguments_key, *self.arguments_aliases)

    @property
    def opener(self) -> str:
        """The marker whose appearance in free text starts a call group ("" if none)."""
        return self.section_start or self.call_start


class UnknownFormatError(KeyError):
    """``get_format`` was given a name that is not registered."""

    def __init__(self, name: str, valid: tuple[str, ...]) -> None:
        super().__init__(name)
        self.name = name
        self.valid = valid

    def __str__(self) -> str:
        return f"unknown tool-call format {self.name!r}; valid formats: {', '.join(self.valid)}"

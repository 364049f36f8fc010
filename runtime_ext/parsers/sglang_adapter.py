"""Our pure tool-call parsers as SGLang ``BaseFormatDetector``s.

``register_tool_parsers()`` adds ``structserve_<format>`` for every registered
format (``structserve_generic``, ``structserve_qwen``, …; the prefix keeps them
clear of SGLang's own names) to ``FunctionCallParser.ToolCallParserEnum`` and
``parser_names.TOOL_CALL_PARSER_NAMES``. It imports SGLang only when called, is
idempotent, and is meant to be called from ``runtime_ext.plugin.register``.

Mapping to SGLang's conventions: non-streaming ``ToolCallItem.tool_index`` is the
tool's position in the request (as ``parse_base_json`` does), streaming items carry
the call index; ``prev_tool_call_arr``/``streamed_args_for_tool`` always agree, so
SGLang's end-of-stream "remaining arguments" check sends nothing twice.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

from runtime_ext.formats import FORMAT_NAMES, CallStyle, ToolFormat, call_frame, get_format, group_frame
from runtime_ext.parsers.tool_calls import ParseEvent, ToolCallParser, parse

PARSER_PREFIX = "structserve_"
_classes: dict[str, type] = {}


def parser_name(format_name: str) -> str:
    """SGLang's ``--tool-call-parser`` name of one of our formats."""
    return PARSER_PREFIX + format_name


def _tool_names(tools: Sequence[Any] | None) -> list[str]:
    return [tool.function.name for tool in tools or () if tool.function.name]


def _tool_schemas(tools: Sequence[Any] | None) -> dict[str, Any]:
    """Each tool's parameters schema (the XML formats type argument values by it)."""
    return {tool.function.name: tool.function.parameters for tool in tools or () if tool.function.name}


def structure_frame(fmt: ToolFormat, name: str) -> tuple[str, str, str]:
    """(begin, end, trigger) of a legacy SGLang structural tag for one call of ``name``."""
    before, after = call_frame(fmt, name)
    opening, closing = group_frame(fmt)
    if fmt.style is CallStyle.JSON_SEQUENCE:
        opening = fmt.call_start
    return opening + before, after + closing, fmt.opener


def _sglang() -> SimpleNamespace:
    """The SGLang types the detectors use (imported only when needed)."""
    from sglang.srt.function_call.base_format_detector import BaseFormatDetector
    from sglang.srt.function_call.core_types import StreamingParseResult, StructureInfo, ToolCallItem

    return SimpleNamespace(Base=BaseFormatDetector, Result=StreamingParseResult, Info=StructureInfo, Item=ToolCallItem)


def _has_tool_call(fmt: ToolFormat, text: str) -> bool:
    starts = {CallStyle.PYTHONIC: "[", CallStyle.TAGGED: "{", CallStyle.JSON_SEQUENCE: "{"}
    bare = fmt.bare_calls and text.lstrip().startswith(starts.get(fmt.style, "\0"))
    return bool(fmt.opener and fmt.opener in text) or bare


def _non_stream(fmt: ToolFormat, text: str, tools: list, sg: SimpleNamespace) -> Any:
    """SGLang's ``detect_and_parse``: ``tool_index`` is the tool's position in ``tools``."""
    names = _tool_names(tools)
    result = parse(fmt, text, names, _tool_schemas(tools))
    index = {name: i for i, name in enumerate(names)}
    calls = [sg.Item(tool_index=index.get(c.name, -1), name=c.name, parameters=c.arguments) for c in result.calls]
    return sg.Result(normal_text=result.content, calls=calls)


def _streamed(detector: Any, event: ParseEvent, sg: SimpleNamespace) -> Any:
    """One event as SGLang items; keeps the detector's per-call bookkeeping in step."""
    items = []
    for delta in event.calls:
        while len(detector.streamed_args_for_tool) <= delta.index:
            detector.streamed_args_for_tool.append("")
            detector.prev_tool_call_arr.append({"name": delta.name, "arguments": ""})
        detector.streamed_args_for_tool[delta.index] += delta.arguments
        detector.prev_tool_call_arr[delta.index]["arguments"] = detector.streamed_args_for_tool[delta.index]
        detector.current_tool_id = delta.index
        items.append(sg.Item(tool_index=delta.index, name=delta.name, parameters=delta.arguments))
    return sg.Result(normal_text=event.content, calls=items)


_NO_LEGACY_TAG = (CallStyle.PYTHONIC, CallStyle.XML_PARAMS)
"""Styles whose arguments are not one JSON object (SGLang's legacy tags cannot hold them)."""


def _make_detector_class(fmt: ToolFormat) -> type:
    """A ``BaseFormatDetector`` subclass delegating to ``ToolCallParser(fmt)``."""
    sg = _sglang()

    class StructserveDetector(sg.Base):  # type: ignore[misc, name-defined]
        """structserve's parser for one tool-call format, inside SGLang."""

        FORMAT = fmt

        def __init__(self) -> None:
            super().__init__()
            self.bot_token, self.eot_token = fmt.opener, fmt.call_end or fmt.section_end
            self._parser: ToolCallParser | None = None

        def has_tool_call(self, text: str) -> bool:
            return _has_tool_call(fmt, text)

        def detect_and_parse(self, text: str, tools: list) -> Any:
            return _non_stream(fmt, text, tools, sg)

        def parse_streaming_increment(self, new_text: str, tools: list) -> Any:
            if self._parser is None:
                self._parser = ToolCallParser(fmt, _tool_names(tools), _tool_schemas(tools))
            return _streamed(self, self._parser.feed(new_text), sg)

        def finish(self, tools: list) -> Any:
            return sg.Result() if self._parser is None else _streamed(self, self._parser.finish(), sg)

        def supports_structural_tag(self) -> bool:
            return fmt.style not in _NO_LEGACY_TAG

        def structure_info(self) -> Any:
            if fmt.style in _NO_LEGACY_TAG:
                raise NotImplementedError(f"{fmt.name} calls have no legacy structural tag")
            return lambda name: sg.Info(*structure_frame(fmt, name))

    StructserveDetector.__name__ = StructserveDetector.__qualname__ = (
        "Structserve" + fmt.name.title().replace("_", "") + "Detector"
    )
    return StructserveDetector


def detector_class(format_name: str) -> type:
    """The (cached) detector class of one of our formats."""
    fmt = get_format(format_name)
    if fmt.name not in _classes:
        _classes[fmt.name] = _make_detector_class(fmt)
    return _classes[fmt.name]


def register_tool_parsers() -> tuple[str, ...]:
    """Register ``structserve_<format>`` parsers with SGLang (idempotent); return the names."""
    from sglang.srt.function_call import parser_names
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    registered = []
    for format_name in FORMAT_NAMES:
        name = parser_name(format_name)
        FunctionCallParser.ToolCallParserEnum[name] = detector_class(format_name)
        if name not in parser_names.TOOL_CALL_PARSER_NAMES:
            parser_names.TOOL_CALL_PARSER_NAMES.append(name)
        registered.append(name)
    return tuple(registered)

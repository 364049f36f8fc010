"""Parsers of the JSON-envelope styles without brackets: TAGGED and JSON_SEQUENCE.

TAGGED (qwen/hermes, generic): ``<tool_call> ENVELOPE </tool_call>`` anywhere in the
text; with ``bare_calls`` also a bare envelope at the start of the output or right
after a call. JSON_SEQUENCE (llama3): an optional ``<|python_tag|>`` (anywhere) or a
bare envelope (start of output), then envelopes separated by ``;``.
"""

from __future__ import annotations

from runtime_ext.parsers.core import Core, Step, text_loop
from runtime_ext.parsers.envelope import read_envelope


def _starters(core: Core) -> str:
    bare = "{" if core.fmt.bare_calls and core.bare_ok else ""
    return core.fmt.call_start[:1] + bare


def _tagged_call(core: Core) -> Step[None]:
    """At ``call_start``: one call block."""
    core.begin(core.pos)
    core.pos += len(core.fmt.call_start)
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() != "{":
        core.reject(core.pos)
        return
    if (yield from read_envelope(core, bare=False)):
        yield from core.skip_ws_then(core.fmt.call_end)


def run_tagged(core: Core) -> Step[None]:
    """The whole output in the TAGGED style."""

    def try_call() -> Step[bool]:
        if (yield from core.match(core.fmt.call_start)):
            yield from _tagged_call(core)
            return True
        if core.peek() == "{" and core.fmt.bare_calls and core.bare_ok:
            core.begin(core.pos)
            yield from read_envelope(core, bare=True)
            return True
        return False

    yield from text_loop(core, try_call, lambda: _starters(core))


def _sequence(core: Core, bare: bool) -> Step[None]:
    """Envelopes separated by ``;`` (``pos`` at the first one's ``{``)."""
    separator = core.fmt.separator.strip()
    while (yield from read_envelope(core, bare=bare)):
        saved = core.pos
        yield from core.skip_ws()
        if not ((yield from core.fill(1)) and core.peek() == separator):
            core.pos = saved
            return
        core.pos += len(separator)
        yield from core.skip_ws()
        if not ((yield from core.fill(1)) and core.peek() == "{"):
            return
        core.begin(core.pos)


def run_sequence(core: Core) -> Step[None]:
    """The whole output in the JSON_SEQUENCE style."""

    def try_call() -> Step[bool]:
        if (yield from core.match(core.fmt.call_start)):
            core.begin(core.pos)
            core.pos += len(core.fmt.call_start)
            yield from core.skip_ws()
            yield from core.need(1)
            if core.peek() != "{":
                core.reject(core.pos)
                return True
            yield from _sequence(core, bare=False)
            return True
        if core.peek() == "{" and core.bare_ok:
            core.begin(core.pos)
            yield from _sequence(core, bare=True)
            return True
        return False

    yield from text_loop(core, try_call, lambda: _starters(core))

"""Parser of the JSON_ARRAY style (Mistral): ``[TOOL_CALLS] [ENVELOPE, ENVELOPE, ...]``.

The marker may appear anywhere in the text. An element that is not a call (unknown
name, not an envelope) is content; the array goes on. Text that breaks the array
after a call ends the calls (it is parsed as free text again); a missing ``]`` at
the end of the output is tolerated.
"""

from __future__ import annotations

from runtime_ext.parsers.core import Core, Step, marked_loop
from runtime_ext.parsers.envelope import read_envelope


def _elements(core: Core) -> Step[None]:
    """Array elements; ``pos`` just after the ``[``."""
    first = True
    while True:
        yield from core.skip_ws()
        if first:
            yield from core.need(1)
        elif not (yield from core.fill(1)):
            return
        if core.peek() == "]":
            core.pos += 1
            return
        if core.peek() != "{":
            return
        if core.call_start is None:
            core.begin(core.pos)
        yield from read_envelope(core, bare=False)
        first = False
        yield from core.skip_ws()
        if not (yield from core.fill(1)) or core.peek() not in ",]":
            return
        core.pos += 1
        if core.text[core.pos - 1] == "]":
            return


def _array(core: Core) -> Step[None]:
    """At the marker: the marker, then the array."""
    core.open_group(core.pos)
    core.pos += len(core.fmt.call_start)
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() != "[":
        core.reject(core.pos)
        return
    core.pos += 1
    yield from _elements(core)
    core.close_group()


def run_array(core: Core) -> Step[None]:
    """The whole output in the JSON_ARRAY style."""
    yield from marked_loop(core, core.fmt.call_start, _array)

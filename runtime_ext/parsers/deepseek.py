"""Parser of the NAMED_BLOCKS style (DeepSeek-V3, V3.1, Kimi-K2).

``<｜tool▁calls▁begin｜>`` then, per call,
``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>``
(calls separated by whitespace), then ``<｜tool▁calls▁end｜>``. With ``index_sep``
(Kimi-K2's ``functions.NAME:0``) the name ends at the last ``index_sep`` followed by
digits; a name without that counter is not a call. The name is streamed
when the arguments object opens. A block with an unknown name is content; missing
closing markers at the end of the output are tolerated.
"""

from __future__ import annotations

from runtime_ext.parsers.core import Core, Step, Truncated, marked_loop
from runtime_ext.parsers.jsonscan import scan_container, stream_value


def _name(core: Core) -> Step[str]:
    """The text up to the first character of ``name_end`` (``pos`` stops there)."""
    stop = core.fmt.name_end[:1]
    searched = core.pos
    while True:
        found = core.text.find(stop, searched)
        if found >= 0:
            name = core.text[core.pos : found]
            core.pos = found
            return name.strip()
        searched = len(core.text)
        if core.eof:
            raise Truncated
        yield


def _without_index(core: Core, name: str) -> str | None:
    """``name`` less its ``index_sep`` + counter (None when the format wants one and it is missing)."""
    sep = core.fmt.index_sep
    if not sep:
        return name
    head, found, counter = name.rpartition(sep)
    return head if found and counter.isdigit() and counter.isascii() else None


def _trailer(core: Core) -> Step[None]:
    fmt = core.fmt
    yield from core.skip_ws_then(fmt.arguments_end.strip())
    yield from core.skip_ws_then(fmt.call_end)


def _call(core: Core) -> Step[None]:
    """At ``call_start``: one call block (emitted as a call or as content)."""
    fmt = core.fmt
    if core.call_start is None:
        core.begin(core.pos)
    core.pos += len(fmt.call_start)
    name = _without_index(core, (yield from _name(core)))
    if not (yield from core.take(fmt.name_end)):
        core.reject(core.pos)
        return
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() != "{":
        core.reject(core.pos)
        return
    if not name or not core.known(name):
        core.pos = yield from scan_container(core, core.pos)
        yield from _trailer(core)
        core.reject(core.pos)
        return
    core.open_call(name)
    yield from stream_value(core)
    core.close_call()
    yield from _trailer(core)


def _section_calls(core: Core) -> Step[None]:
    """Calls up to ``section_end`` (``pos`` after ``section_start``)."""
    fmt = core.fmt
    first = True
    while True:
        yield from core.skip_ws()
        if first:
            yield from core.need(1)
        elif not (yield from core.fill(1)):
            return
        end_length = yield from core.match_tail(fmt.section_end)
        if end_length:
            core.pos += end_length
            return
        if not (yield from core.match(fmt.call_start)):
            rest = core.text[core.pos :]
            if core.eof and fmt.call_start.startswith(rest):  # a call cut inside its marker
                core.begin(core.pos if core.call_start is None else core.call_start)
                raise Truncated
            return
        yield from _call(core)
        first = False


def _section(core: Core) -> Step[None]:
    """At ``section_start``: the calls section."""
    core.open_group(core.pos)
    core.pos += len(core.fmt.section_start)
    yield from _section_calls(core)
    core.close_group()


def run_named_blocks(core: Core) -> Step[None]:
    """The whole output in the NAMED_BLOCKS style."""
    yield from marked_loop(core, core.fmt.section_start, _section)

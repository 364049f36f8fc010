"""Reading one JSON call envelope ``{"name": ..., "arguments": {...}}``.

Fast path (the canonical key order, what grammars force): the name is streamed as
soon as the arguments object opens, then the arguments stream piecewise. Any other
shape (keys reordered, extra keys first, string-encoded arguments) is read whole
and decided at its closing brace — except for *bare* envelopes (no start marker),
which must follow the fast path or are content, so that ordinary JSON answers are
streamed rather than held back.
"""

from __future__ import annotations

from typing import Any

from runtime_ext.parsers.core import Core, Malformed, Step, Truncated
from runtime_ext.parsers.jsonscan import compact, read_string, scan_container, stream_value, strict_loads


def _expect(core: Core, ch: str) -> Step[bool]:
    """Skip whitespace, then consume ``ch`` if it is next."""
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() != ch:
        return False
    core.pos += 1
    return True


def _key(core: Core) -> Step[str | None]:
    """Skip whitespace, read a string key and its colon; None on any deviation."""
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() != '"':
        return None
    key = yield from read_string(core)
    if key is None or not (yield from _expect(core, ":")):
        return None
    return key


def _header(core: Core, evidence: list[bool]) -> Step[str | None]:
    """Read ``{"name": NAME, "arguments":`` and stop at the arguments' ``{``.

    Returns NAME, or None on a deviation from that shape. Sets ``evidence[0]``
    once the name key was read (the object is meant as a call).
    """
    core.pos += 1  # the opening brace
    if (yield from _key(core)) != core.fmt.name_key:
        return None
    evidence[0] = True
    yield from core.skip_ws()
    yield from core.need(1)
    name = (yield from read_string(core)) if core.peek() == '"' else None
    if not isinstance(name, str) or not (yield from _expect(core, ",")):
        return None
    if (yield from _key(core)) not in core.fmt.arguments_keys:
        return None
    yield from core.skip_ws()
    yield from core.need(1)
    return name if core.peek() == "{" else None


def _close(core: Core) -> Step[None]:
    """After the arguments: ``}`` ends the envelope; extra keys are skipped."""
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() == "}":
        core.pos += 1
    elif core.peek() == ",":
        core.pos = yield from scan_container(core, core.pos + 1, depth=1)
    else:
        raise Malformed("text after the arguments of a call")


def _decode(core: Core, obj: Any) -> tuple[str, str] | None:
    """(name, canonical arguments) of an envelope object, or None if it is no call."""
    if not isinstance(obj, dict) or not isinstance(obj.get(core.fmt.name_key), str):
        return None
    keys = [key for key in core.fmt.arguments_keys if key in obj]
    arguments = obj[keys[0]] if keys else {}
    if isinstance(arguments, str):
        try:
            arguments = strict_loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return obj[core.fmt.name_key], compact(arguments)


def _whole(core: Core, start: int) -> Step[bool]:
    """Read the envelope at ``start`` whole; emit it as a call or as content."""
    end = yield from scan_container(core, start)
    try:
        decoded = _decode(core, strict_loads(core.text[start:end]))
    except ValueError:
        decoded = None
    if decoded is None or not core.known(decoded[0]):
        core.reject(end)
        return False
    core.pos = end
    core.whole_call(*decoded)
    return True


def read_envelope(core: Core, *, bare: bool) -> Step[bool]:
    """Read the envelope at ``pos`` (a ``{``); True if it was a call.

    A non-call is emitted as content (from ``core.call_start``). Raises
    :class:`Truncated` when the text ends inside a call and :class:`Malformed`
    when streamed arguments turn out invalid.
    """
    start, evidence = core.pos, [False]
    try:
        name = yield from _header(core, evidence)
    except Truncated:
        if bare and not evidence[0]:
            core.reject(len(core.text))
            return False
        raise
    if name is not None and core.known(name):
        core.open_call(name)
        yield from stream_value(core)
        yield from _close(core)
        core.close_call()
        return True
    if bare:
        core.reject(core.pos)
        return False
    core.pos = start
    return (yield from _whole(core, start))

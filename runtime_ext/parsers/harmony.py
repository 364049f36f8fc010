"""Parser of the HARMONY style (gpt-oss).

The output is a run of messages ``[<|start|>ROLE[ to=R]]<|channel|>CHANNEL[ to=R][
[<|constrain|>]TYPE]<|message|>BODY`` ended by ``<|end|>``, ``<|call|>`` or
``<|return|>``. A message addressed ``to=functions.NAME`` is a call whose BODY is the
arguments JSON (the recipient may sit before the channel, as the official template
renders history, or after it, as the model writes); any other message's BODY is
content, and its header and end marker are dropped, so no Harmony marker reaches
content. A header that does not read as one is content as written. A call to an
unknown name is content, markers included. Pure.
"""

from __future__ import annotations

import re

from runtime_ext.formats.tool_formats import (
    HARMONY_CALL,
    HARMONY_CHANNEL,
    HARMONY_END,
    HARMONY_MESSAGE,
    HARMONY_RETURN,
    HARMONY_START,
)
from runtime_ext.parsers.core import Core, Step, Truncated, text_loop
from runtime_ext.parsers.jsonscan import scan_container, stream_value

FUNCTIONS = "functions."
_HEADER_LIMIT = 512  # characters from the opener to <|message|> (a header is a few tokens)
_HEADER = re.compile(
    r"(?:<\|start\|>[A-Za-z]+(?:\s*to=(?P<before>[^\s<]+))?\s*)?"
    r"<\|channel\|>[A-Za-z]+(?:\s*to=(?P<after>[^\s<]+))?"
    r"\s*(?:<\|constrain\|>)?\s*(?:[A-Za-z]+)?\s*\Z"
)
_DROPPED = (HARMONY_END, HARMONY_CALL, HARMONY_RETURN)


def _header(core: Core) -> Step[tuple[str, int] | None]:
    """At an opener: (header text, where the body starts), or None when no
    ``<|message|>`` comes within the limit (the text ended: :class:`Truncated`)."""
    searched = core.pos
    while True:
        found = core.text.find(HARMONY_MESSAGE, searched, core.pos + _HEADER_LIMIT)
        if found >= 0:
            return core.text[core.pos : found], found + len(HARMONY_MESSAGE)
        if len(core.text) >= core.pos + _HEADER_LIMIT:
            return None
        searched = max(core.pos, len(core.text) - len(HARMONY_MESSAGE) + 1)
        if core.eof:
            raise Truncated
        yield


def _call(core: Core, name: str, body: int) -> Step[None]:
    """A message to ``functions.NAME``; ``pos`` at its header, ``body`` after ``<|message|>``."""
    core.begin(core.pos)
    core.pos = body
    yield from core.skip_ws()
    yield from core.need(1)
    if core.peek() != "{":
        core.reject(core.pos)
        return
    if not name or not core.known(name):
        core.pos = yield from scan_container(core, core.pos)
        yield from core.skip_ws_then(HARMONY_CALL)
        core.reject(core.pos)
        return
    core.open_call(name)
    yield from stream_value(core)
    core.close_call()
    yield from core.skip_ws_then(HARMONY_CALL)


def _message(core: Core, opener: str) -> Step[None]:
    """At ``opener``: a message header, then a call or a content body."""
    start = core.pos
    try:
        read = yield from _header(core)
    except Truncated:
        if FUNCTIONS in core.text[start:]:
            core.begin(start)
            raise
        core.pos = len(core.text)  # a header cut by the end of the output: markers only
        return
    match = None if read is None else _HEADER.match(read[0])
    if read is None or match is None:
        core.reject(start + len(opener))
        return
    recipient = match.group("before") or match.group("after")
    if recipient is None:
        core.pos = read[1]
        return
    name = recipient[len(FUNCTIONS) :] if recipient.startswith(FUNCTIONS) else ""
    yield from _call(core, name, read[1])


def run_harmony(core: Core) -> Step[None]:
    """The whole output in the HARMONY style."""

    def try_message() -> Step[bool]:
        for marker in _DROPPED:
            if (yield from core.match(marker)):
                core.pos += len(marker)
                return True
        for opener in (HARMONY_START, HARMONY_CHANNEL):
            if (yield from core.match(opener)):
                yield from _message(core, opener)
                return True
        return False

    yield from text_loop(core, try_message, lambda: "<")

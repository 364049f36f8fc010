"""Incremental JSON helpers for the parsers.

``JsonCanonicalizer`` turns raw JSON text, fed in any pieces, into compact
canonical text as it goes: no whitespace outside strings, strings re-escaped like
``json.dumps(..., ensure_ascii=False)`` (``\\u00e9`` -> ``é``, surrogate pairs joined),
numbers as ``json.dumps(json.loads(number))``. For a valid object without duplicate
keys or unpaired surrogates the result equals
``json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from runtime_ext.parsers.core import Core, Malformed, Step, Truncated

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = ("true", "false", "null")
_TOKEN_CHARS = frozenset("0123456789+-.eEtrufalsn")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _encode(ch: str) -> str:
    """``ch`` as ``json.dumps(..., ensure_ascii=False)`` writes it inside a string."""
    if ch in '"\\' or ord(ch) < 0x20:
        return json.dumps(ch)[1:-1]
    return ch


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def strict_loads(text: str) -> Any:
    """``json.loads`` that rejects NaN/Infinity (which Python accepts by default)."""
    return json.loads(text, parse_constant=_reject_constant)


def compact(value: Any) -> str:
    """Compact canonical JSON text of ``value``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class JsonCanonicalizer:
    """Feed raw text of one JSON object/array; get canonical text back piecewise.

    ``push`` consumes characters until the value ends and returns
    ``(output, consumed)``; ``done`` tells that the value ended. Raises
    :class:`Malformed` on a lexical error, or at the end when the whole is not JSON.
    """

    def __init__(self) -> None:
        self.done = False
        self.output: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escape: str | None = None
        self._high: int | None = None
        self._token = ""

    def push(self, chunk: str) -> tuple[str, int]:
        """Consume from ``chunk`` up to the end of the value."""
        out: list[str] = []
        consumed = 0
        for ch in chunk:
            if self.done:
                break
            consumed += 1
            out.append(self._string_char(ch) if self._in_string else self._outside(ch))
        text = "".join(out)
        self.output.append(text)
        if self.done:
            try:
                strict_loads("".join(self.output))
            except ValueError as exc:
                raise Malformed(str(exc)) from exc
        return text, consumed

    def _outside(self, ch: str) -> str:
        out = self._finish_token() if self._token and ch not in _TOKEN_CHARS else ""
        if ch in " \t\n\r":
            return out
        if ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            self.done = self._depth == 0
        elif ch in _TOKEN_CHARS and self._depth > 0:
            self._token += ch
            return out
        elif ch not in ",:" or self._depth == 0:
            raise Malformed(f"unexpected {ch!r} in JSON")
        return out + ch

    def _finish_token(self) -> str:
        token, self._token = self._token, ""
        if token in _LITERALS:
            return token
        if not _NUMBER.fullmatch(token):
            raise Malformed(f"bad JSON token {token!r}")
        value = json.loads(token)
        return token if isinstance(value, float) and value in (float("inf"), float("-inf")) else json.dumps(value)

    def _string_char(self, ch: str) -> str:
        if self._escape is not None:
            return self._escape_char(ch)
        if ch == "\\":
            self._escape = ""
            return ""
        if ch == '"':
            self._in_string = False
            return self._flush_high() + '"'
        if ord(ch) < 0x20:
            raise Malformed("control character in a JSON string")
        return self._flush_high() + ch

    def _escape_char(self, ch: str) -> str:
        escape = self._escape or ""
        if not escape:
            if ch in _SIMPLE_ESCAPES:
                self._escape = None
                return self._flush_high() + _encode(_SIMPLE_ESCAPES[ch])
            if ch != "u":
                raise Malformed(f"bad JSON escape \\{ch}")
            self._escape = "u"
            return ""
        if ch not in _HEX:
            raise Malformed("bad \\u escape in a JSON string")
        escape += ch
        self._escape = escape if len(escape) < 5 else None
        return "" if self._escape else self._code_unit(int(escape[1:], 16))

    def _code_unit(self, unit: int) -> str:
        if 0xD800 <= unit <= 0xDBFF:
            out = self._flush_high()
            self._high = unit
            return out
        if 0xDC00 <= unit <= 0xDFFF:
            if self._high is None:
                return f"\\u{unit:04x}"
            high, self._high = self._high, None
            return _encode(chr(0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00)))
        return self._flush_high() + _encode(chr(unit))

    def _flush_high(self) -> str:
        if self._high is None:
            return ""
        high, self._high = self._high, None
        return f"\\u{high:04x}"


def scan_container(core: Core, start: int, depth: int = 0) -> Step[int]:
    """End (exclusive) of the JSON container around/at ``start``; raises :class:`Truncated`.

    With ``depth=0``, ``text[start]`` is the opening bracket; with ``depth=1`` the
    scan starts inside an already opened container.
    """
    i, in_string, escaped = start, False, False
    while True:
        text = core.text
        while i < len(text):
            ch = text[i]
            i += 1
            if in_string:
                escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            elif ch == '"':
                in_string = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth <= 0:
                    return i
        if core.eof:
            raise Truncated
        yield


def read_string(core: Core) -> Step[str | None]:
    """Read the JSON string at ``pos`` (which must be ``"``); None if not a valid string."""
    end = core.pos + 1
    escaped = False
    while True:
        text = core.text
        while end < len(text):
            ch = text[end]
            end += 1
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                try:
                    value: str = json.loads(text[core.pos : end])
                except ValueError:
                    return None
                core.pos = end
                return value
        if core.eof:
            raise Truncated
        yield


def stream_value(core: Core) -> Step[None]:
    """Stream the JSON container at ``pos`` as canonical arguments of the open call."""
    canon = JsonCanonicalizer()
    while True:
        out, consumed = canon.push(core.text[core.pos :])
        core.pos += consumed
        core.add_arguments(out)
        if canon.done:
            return
        if core.eof:
            raise Truncated
        yield

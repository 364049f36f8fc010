"""Parser of the PYTHONIC style: ``[f(a=1, b="x"), g()]`` at the start of the output.

Each call is decided at its closing parenthesis (parsed with ``ast``; keyword
arguments must be Python literals) and then emitted whole: a name delta and one
arguments delta (compact JSON of the keyword arguments). Pythonic calls therefore
stream per call, not per character. A list that does not start with a call is
content; a call that does not parse, or names an unknown tool, is content.
"""

from __future__ import annotations

import ast
from typing import Any

from runtime_ext.parsers.core import Core, Step, Truncated, text_loop
from runtime_ext.parsers.jsonscan import compact


def _jsonable(value: Any) -> Any:
    """A Python literal as a JSON value (tuples become lists); TypeError otherwise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _jsonable(v) for k, v in value.items()}
    raise TypeError(f"not JSON-like: {type(value).__name__}")


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def parse_python_call(text: str) -> tuple[str, str] | None:
    """``(name, compact JSON arguments)`` of ``name(k=literal, ...)``, else None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(node, ast.Call) or node.args or any(k.arg is None for k in node.keywords):
        return None
    name = _dotted(node.func)
    try:
        kwargs = {k.arg: _jsonable(ast.literal_eval(k.value)) for k in node.keywords if k.arg}
        return (name, compact(kwargs)) if name else None
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _identifier(core: Core) -> Step[str]:
    """A (dotted) identifier at ``pos``, possibly empty; ``pos`` moves past it."""
    end = core.pos
    while True:
        text = core.text
        while end < len(text) and (text[end].isalnum() or text[end] in "_."):
            end += 1
        if end < len(text) or core.eof:
            name, core.pos = text[core.pos : end], end
            return name
        yield


def _call_end(core: Core, start: int) -> Step[int]:
    """End (exclusive) of the parenthesised arguments at ``start``; raises Truncated."""
    i, depth, quote, escaped = start, 0, "", False
    while True:
        text = core.text
        while i < len(text):
            ch = text[i]
            i += 1
            if quote:
                escaped, quote = (False, quote) if escaped else (ch == "\\", "" if ch == quote else quote)
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth == 0:
                    return i
        if core.eof:
            raise Truncated
        yield


def _element(core: Core, first: bool) -> Step[bool]:
    """One list element; False when the list is not (or no longer) a call list."""
    start = core.pos
    name = yield from _identifier(core)
    yield from core.skip_ws()
    if not name or not (yield from core.fill(1)) or core.peek() != "(":
        if not first:
            core.pos = start
        return False
    if core.call_start is None:
        core.begin(start)
    end = yield from _call_end(core, core.pos)
    decoded = parse_python_call(core.text[start:end])
    if decoded is None or not core.known(decoded[0]):
        core.reject(end)
    else:
        core.pos = end
        core.whole_call(*decoded)
    return True


def _elements(core: Core) -> Step[None]:
    """Calls up to ``]`` (``pos`` after ``[``)."""
    first = True
    while True:
        yield from core.skip_ws()
        if not (yield from core.fill(1)):
            return
        if core.peek() == "]":
            core.pos += 1
            return
        if not (yield from _element(core, first)):
            return
        first = False
        yield from core.skip_ws()
        if not (yield from core.fill(1)) or core.peek() not in ",]":
            return
        core.pos += 1
        if core.text[core.pos - 1] == "]":
            return


def _list(core: Core) -> Step[None]:
    """At ``[``: a list of calls (content if it holds none)."""
    core.open_group(core.pos)
    core.pos += 1
    yield from _elements(core)
    core.close_group()


def run_pythonic(core: Core) -> Step[None]:
    """The whole output in the PYTHONIC style."""

    def try_call() -> Step[bool]:
        if core.peek() == "[" and core.bare_ok:
            yield from _list(core)
            return True
        return False

    yield from text_loop(core, try_call, lambda: "[" if core.bare_ok else "")

"""Typed errors of the grammar layer (pure: no torch, sglang, fastapi or xgrammar).

Every error is a ``GrammarError`` with what the OpenAI error envelope needs:

- ``message``: says what is wrong and what to change;
- ``param``: the request field (set by the service with ``with_param``, e.g.
  ``"response_format.json_schema.schema"`` or ``"tools.2.function.parameters"``);
- ``pointer``: RFC 6901 JSON pointer inside the schema (``""`` is the root), or None;
- ``keyword``: the JSON-Schema keyword at fault, or None;
- ``code``: a stable machine-readable code (class attribute).

The service maps every ``GrammarError`` to HTTP 400. ``CompilerBusyError`` is the one error
here that is not the client's: the compiler could not get the CPU it needed (503).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "LOOSENING_HINT",
    "CompilerBusyError",
    "GrammarCompileError",
    "GrammarError",
    "GrammarSyntaxError",
    "InvalidSchemaError",
    "RemoteRefError",
    "SchemaTooComplexError",
    "UnsatisfiableSchemaError",
    "UncheckablePatternError",
    "Unsupported",
    "UnsupportedGrammarError",
    "UnsupportedKeywordError",
]

LOOSENING_HINT = (
    'or set "allow_schema_loosening": true in the request to drop them from the grammar '
    "(the output is still validated against the full schema)"
)
"""How a client opts into loosening; quoted by ``UnsupportedKeywordError``."""

_E = TypeVar("_E", bound="GrammarError")


@dataclass(frozen=True)
class Unsupported:
    """One keyword occurrence the grammar engine would not enforce exactly.

    Attributes:
        keyword: the JSON-Schema keyword (e.g. ``"uniqueItems"``).
        pointer: RFC 6901 pointer of the subschema holding it (``""`` = root), or
            None when only known from the compiler's warning.
        reason: why it is not enforced and what to do instead.
    """

    keyword: str
    pointer: str | None
    reason: str

    def describe(self) -> str:
        """``"`kw` at /p: reason"`` for messages."""
        where = "(location unknown)" if self.pointer is None else (self.pointer or "/")
        return f"`{self.keyword}` at {where}: {self.reason}"


class GrammarError(Exception):
    """Base class: a constraint the service cannot turn into an exact grammar (400)."""

    code: str = "grammar_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        pointer: str | None = None,
        keyword: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.pointer = pointer
        self.keyword = keyword

    def __str__(self) -> str:
        return self.message

    def with_param(self: _E, param: str | None) -> _E:
        """A copy of this error (same class and attributes) with ``param`` set."""
        clone = type(self).__new__(type(self), *self.args)
        clone.__dict__.update(self.__dict__)
        clone.args = self.args
        clone.param = param
        return clone


class InvalidSchemaError(GrammarError):
    """Not a valid Draft 2020-12 JSON Schema (metaschema check, or a dangling local
    ``$ref``); ``pointer`` locates the failing part."""

    code = "invalid_schema"


class UnsupportedKeywordError(GrammarError):
    """Keywords the grammar would silently not enforce (fail closed).

    ``unsupported`` lists every occurrence; ``keyword``/``pointer`` are the first one's.
    """

    code = "unsupported_schema_keyword"

    def __init__(
        self, unsupported: Sequence[Unsupported], *, param: str | None = None, llguidance: str = "", hint: str = ""
    ) -> None:
        """``llguidance``: why llguidance's own JSON Schema compiler refused the schema too;
        ``hint``: another way out, appended."""
        items = tuple(unsupported)
        if not items:
            raise ValueError("UnsupportedKeywordError needs at least one Unsupported")
        listed = "; ".join(u.describe() for u in items)
        also = f" (llguidance's JSON Schema compiler refuses it too: {llguidance})" if llguidance else ""
        message = (
            f"the schema uses {len(items)} keyword occurrence(s) the grammar engine cannot "
            f"enforce exactly: {listed}{also}. Remove or rewrite them, {LOOSENING_HINT}{hint}"
        )
        super().__init__(message, param=param, pointer=items[0].pointer, keyword=items[0].keyword)
        self.unsupported = items


class RemoteRefError(GrammarError):
    """A ``$ref`` that is not a local JSON pointer (``#`` or ``#/...``)."""

    code = "remote_ref"


class SchemaTooComplexError(GrammarError):
    """Beyond a size limit (depth, nodes, enum size, bytes) or compile took too long."""

    code = "schema_too_complex"


class UnsatisfiableSchemaError(GrammarError):
    """No finite JSON value can complete the grammar where the schema leads: a ``$ref``
    loop that consumes no input (the grammar then allows no token at all), a required
    property or ``minItems`` that recurses without end, or a reference to ``false``.
    ``pointer`` is where to change it."""

    code = "unsatisfiable_schema"


class UncheckablePatternError(GrammarError):
    """A ``pattern`` or ``patternProperties`` regex the service cannot match in linear time
    (``grammars.json_schema.patterns``: a backreference, a lookaround, a program too large for RE2).
    Refused loosening or not: every pattern is matched again when the output is validated."""

    code = "unsupported_pattern"


class GrammarCompileError(GrammarError):
    """xgrammar rejected the constraint (e.g. an invalid ``pattern``) or crashed on it;
    the message quotes xgrammar."""

    code = "grammar_compile_failed"


class GrammarSyntaxError(GrammarError):
    """A client grammar (e.g. Lark) that is not valid in its own language: a syntax error, an
    undefined or twice-defined name, no ``start`` rule. ``line`` is the 1-based line in the
    grammar text, or None."""

    code = "invalid_grammar"

    def __init__(self, message: str, *, line: int | None = None, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.line = line


class UnsupportedGrammarError(GrammarError):
    """A valid client grammar using a construct that cannot be translated to an exact xgrammar
    grammar (fail closed: never a looser one). ``construct`` names it (e.g. ``"%declare"``,
    ``"lookahead (?=...)"``), ``line`` is its 1-based line in the grammar text or None; the
    message says what to change."""

    code = "unsupported_grammar_construct"

    def __init__(self, message: str, *, construct: str, line: int | None = None, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.construct = construct
        self.line = line


class CompilerBusyError(Exception):
    """Not a ``GrammarError``: the compile had CPU budget left when its wall-time cap passed,
    so the machine is overloaded, not the schema too complex (``grammars.compile.worker_clock``).
    The service answers 503 with Retry-After."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

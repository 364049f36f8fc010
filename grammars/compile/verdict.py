"""One answer per JSON schema: served or refused, by which library, what was ignored, why.

``schema_verdict`` runs what the service runs for a ``response_format`` schema or a tool's
``parameters``: the policy (``grammars.json_schema.check_schema``), then the llguidance route
(``LarkRouter.route``: translation and llguidance's own validation, no tokenizer; a schema with
keywords xgrammar cannot enforce goes whole to llguidance's own JSON Schema compiler,
``LarkRouter.route_native``, or is refused), and, for a
schema llguidance does not take, the bounded xgrammar compile when a compiler is given. The
coverage bench and the service's grammar check read the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from grammars.compile.compiler import GrammarCompiler
from grammars.compile.llguidance_route import LarkRouter
from grammars.errors import CompilerBusyError, GrammarError, Unsupported, UnsupportedKeywordError
from grammars.json_schema.policy import CheckedSchema, check_schema, loosen_deferred

__all__ = ["SchemaVerdict", "schema_verdict"]

Library = Literal["llguidance", "xgrammar"]


@dataclass(frozen=True)
class SchemaVerdict:
    """Attributes:
    served: the schema is served (generation enforces it, or what ``loosened`` names
        was dropped on request); False: refused with a 400.
    library: ``llguidance`` or ``xgrammar`` when served, else None.
    ignored: the unknown keywords ignored (annotations), as ``keyword at /pointer``.
    loosened: the assertion keywords dropped on request (``allow_loosening``).
    reason: the 400 message when refused (None when served).
    code: the error code of that 400 (``unsupported_schema_keyword`` ...), else None.
    checked: the policy's result when it passed, else None.
    lark: the llguidance grammar when routed there, else None.
    native: served by llguidance's own JSON Schema compiler, JSON Schema's semantics throughout:
        a schema with keywords xgrammar cannot enforce (``CheckedSchema.unenforced``: no other
        route), or any schema it takes under ``exact``.
    validated: served under the grammar without ``loosened``, every output validated and
        resampled (``grammar.unenforceable: resample``, non-streamed).
    """

    served: bool
    library: Library | None
    ignored: tuple[str, ...] = ()
    loosened: tuple[str, ...] = ()
    reason: str | None = None
    code: str | None = None
    checked: CheckedSchema | None = None
    lark: str | None = None
    native: bool = False
    validated: bool = False


def named(found: tuple[Unsupported, ...]) -> tuple[str, ...]:
    """``keyword at /pointer`` for each occurrence."""
    return tuple(f"{u.keyword} at {u.pointer or '/'}" for u in found)


def schema_verdict(
    schema: Any,
    *,
    allow_loosening: bool = False,
    router: LarkRouter | None = None,
    compiler: GrammarCompiler | None = None,
    resample: bool = False,
    exact: bool = False,
) -> SchemaVerdict:
    """The verdict for ``schema``. ``router`` None: llguidance is not asked (the xgrammar
    backend); ``compiler`` None: a schema left to xgrammar is assumed to compile (the
    policy passed it). ``resample``: what no library enforces is served validated (a
    non-streamed ``response_format`` under ``grammar.unenforceable: resample``).
    ``exact``: JSON Schema's own semantics first (a ``response_format`` schema): llguidance's
    compiler is asked before the strict-mode routes, which narrow what the schema admits.
    ``CompilerBusyError`` propagates (the machine, not the schema)."""
    try:
        checked = check_schema(schema, allow_loosening=allow_loosening, defer_unsupported=router is not None)
    except GrammarError as exc:
        return SchemaVerdict(False, None, reason=exc.message, code=exc.code)
    return _verdict(checked, router, compiler, resample, exact)


def _verdict(
    checked: CheckedSchema, router: LarkRouter | None, compiler: GrammarCompiler | None, resample: bool, exact: bool
) -> SchemaVerdict:
    """``schema_verdict`` after the policy."""
    ignored, loosened = named(checked.ignored), named(checked.loosened)
    if router is not None and (exact or checked.unenforced):
        lark, why = router.route_native(checked.canonical)
        if lark is not None:
            return SchemaVerdict(True, "llguidance", ignored, loosened, checked=checked, lark=lark, native=True)
    if checked.unenforced and router is not None:  # only llguidance's own compiler may take it
        if resample:
            loose = _loose_verdict(checked, router, compiler, exact)
            if loose.served:
                return replace(loose, validated=True)
        refused = UnsupportedKeywordError(checked.unenforced, llguidance=why)
        return SchemaVerdict(False, None, ignored, reason=refused.message, code=refused.code)
    lark = router.route("json_schema", checked.canonical) if router is not None else None
    if lark is not None:
        return SchemaVerdict(True, "llguidance", ignored, loosened, checked=checked, lark=lark)
    if compiler is not None:
        try:
            compiler.compile_json_schema(checked.canonical)
        except CompilerBusyError:
            raise
        except GrammarError as exc:
            return SchemaVerdict(False, None, ignored, loosened, exc.message, exc.code, checked)
    return SchemaVerdict(True, "xgrammar", ignored, loosened, checked=checked)


def _loose_verdict(
    checked: CheckedSchema, router: LarkRouter | None, compiler: GrammarCompiler | None, exact: bool
) -> SchemaVerdict:
    """The verdict for the schema ``checked`` came from, loosened (``allow_loosening``)."""
    try:
        loose = loosen_deferred(checked)
    except GrammarError as exc:
        return SchemaVerdict(False, None, reason=exc.message, code=exc.code)
    return _verdict(loose, router, compiler, False, exact)

"""Compilation and routing: the bounded xgrammar compiler (``compiler.py``: a worker process
with a CPU-time budget, ``worker_clock.py``; the exact xgrammar calls SGLang makes,
``xgrammar_calls.py``) and the llguidance route (``llguidance_lark.py`` translates schemas and
structural tags to llguidance Lark; ``llguidance_route.py`` validates and caches them).
``schema_verdict`` (``verdict.py``) says for one schema: served or refused, by which library,
the ignored keywords, the reason.
"""

from grammars.compile.compiler import CompileStats, GrammarCompiler
from grammars.compile.llguidance_lark import (
    LARK_HEADER,
    NotExpressible,
    json_schema_to_lark,
    strict_schema,
    structural_tag_to_lark,
    text_tokens,
)
from grammars.compile.llguidance_route import LarkRouter
from grammars.compile.verdict import SchemaVerdict, schema_verdict
from grammars.compile.xgrammar_calls import VocabFacts, capture_warnings, compile_text, load_compiler

__all__ = [
    "LARK_HEADER",
    "CompileStats",
    "GrammarCompiler",
    "LarkRouter",
    "NotExpressible",
    "SchemaVerdict",
    "VocabFacts",
    "capture_warnings",
    "compile_text",
    "json_schema_to_lark",
    "load_compiler",
    "schema_verdict",
    "strict_schema",
    "structural_tag_to_lark",
    "text_tokens",
]

"""``structserve serve`` with a broken llguidance, for tests/faults/test_grammar_fallback.py: the real
service and the real engine, where the third-party ``llguidance`` library fails as it does on a
tokenizer it cannot read. Test-only; never used in production.

Importing this module patches ``llguidance`` (nothing of structserve):
- ``llguidance.LLTokenizer`` and ``llguidance.hf.from_tokenizer`` raise ``RuntimeError``, so
  SGLang's ``GuidanceBackend`` (built by ``runtime_ext.grammar_route`` in the scheduler) cannot be
  built: every grammar routed to llguidance must fall back to xgrammar (reason ``build``);
- ``LLMatcher.validate_grammar_with_warnings`` raises for a grammar that contains
  ``CHECK_FAILS`` (e.g. as a property name): the service's grammar check must fall back for that
  one (reason ``check``); every other grammar is checked as usual.

Run as ``python -m tests.broken_llguidance_serve serve ...``. The patch is applied when this is
the main module, so it also holds in SGLang's scheduler: multiprocessing's spawn imports the main
module (as ``__mp_main__``) in every child before it runs the child's target. Imported by a test
(for its constants) it patches nothing.
"""

from __future__ import annotations

from typing import Any

import llguidance
import llguidance.hf

BUILD_FAILURE = "llguidance cannot read this tokenizer (tests/broken_llguidance_serve.py)"
CHECK_FAILS = "llguidance_check_fails_here"


def _unreadable(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(BUILD_FAILURE)


def _break() -> None:
    validate = llguidance.LLMatcher.validate_grammar_with_warnings

    def validate_or_fail(grammar: str, *args: Any, **kwargs: Any) -> Any:
        if CHECK_FAILS in grammar:
            raise RuntimeError("llguidance internal error (tests/broken_llguidance_serve.py)")
        return validate(grammar, *args, **kwargs)

    llguidance.LLTokenizer = _unreadable  # type: ignore[assignment,misc]
    llguidance.hf.from_tokenizer = _unreadable
    llguidance.LLMatcher.validate_grammar_with_warnings = staticmethod(validate_or_fail)  # type: ignore[method-assign]


if __name__ in ("__main__", "__mp_main__"):
    _break()

if __name__ == "__main__":
    from service.cli import app

    app(prog_name="structserve")

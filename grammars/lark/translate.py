"""Client grammars → xgrammar EBNF (pure: no xgrammar, torch, sglang or fastapi).

Used for OpenAI custom tools (``format: {"type": "grammar", "syntax": "lark", ...}``), vLLM's
``structured_outputs.grammar`` (Lark when the text has no ``::=``) and
``structured_outputs.choice``. The output is the EBNF ``xgrammar.GrammarCompiler.compile_grammar``
takes, with root rule ``root``.

Fail closed: whatever cannot be translated exactly raises ``UnsupportedGrammarError`` naming the
construct and its line, and saying what to change; text that is not Lark raises
``GrammarSyntaxError``. Never a looser grammar.

The Lark subset (the one OpenAI documents for custom tools, i.e. LLGuidance's Lark dialect, with
Lark's Earley parser and dynamic lexer as the reference semantics):

- rules ``name: ...`` (``?``/``!`` prefixes, ``-> alias`` and priorities ``.N`` only shape or rank
  parse trees: Earley tries every alternative, so the strings accepted do not change; ignored),
  terminals ``NAME: ...`` (priorities ignored likewise), continuation lines ``| ...``, comments
  ``//`` and ``#``, ``start`` as the start rule;
- ``|``, ``( )``, ``[ ]``, ``?``, ``*``, ``+``, ``~ n``, ``~ n..m``; strings with Lark's escapes and the
  ``i`` flag (ASCII letters); ranges ``"a".."z"``; ``/regex/flags`` (``grammars.lark.regex``);
- ``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` (``grammars.lark.common``);
- ``%ignore``: the ignored terminals may appear, any number of times, between any two items of
  a rule's expansion (at every nesting level, and between repetitions) and before and after
  ``start``; never inside a terminal.

Refused: ``%declare``, ``%override``, ``%extend``, templates, ``%import`` of anything else,
recursive terminals, llguidance's extensions (``%json``, ``%llguidance``, special tokens
``<...>``, ``@grammar``, rule options ``name[lazy]``, ``x{m,n}``), zero-width terminals.

Lexing. The translation is a character-level grammar; Lark lexes: at each point it matches each
expected terminal (and each ``%ignore`` terminal) as far as it can and never re-splits. For
terminals that overlap (``WORD WORD`` on ``"ab"``; ``"a" " b"`` with ``%ignore WS`` on
``"a  b"``) the translation would admit strings Lark rejects, so such grammars are refused
(``grammars.lark.lexing``: a terminal that can go on with a character that can start what may
follow it). One known difference is left, documented rather than detected: Lark compiles a
terminal into a Python regex and takes the first match Python's backtracking finds
(alternatives in order, quantifiers greedy), which is not always the longest: on ``ab``, Lark
matches only ``a`` with ``/a|ab/`` (and ``xa`` of ``xab`` with ``/xa?(ab)?/``), where the
translation, like llguidance's lexer (longest match), admits the whole as one token. Write
such alternatives longest-first (Lark itself sorts the alternatives of a terminal's definition
so, not those inside ``/.../``).
"""

from __future__ import annotations

from collections.abc import Sequence

from grammars.errors import GrammarSyntaxError, UnsupportedGrammarError
from grammars.lark.common import resolve
from grammars.lark.ebnf import emit_grammar, literal, node_ebnf, reachable
from grammars.lark.lexing import check_lexing
from grammars.lark.regex import parse_regex
from grammars.lark.syntax import parse_lark

__all__ = ["choice_to_ebnf", "is_probably_lark", "lark_to_ebnf", "regex_to_ebnf"]


def is_probably_lark(text: str) -> bool:
    """vLLM's rule: a grammar without ``::=`` is Lark, otherwise EBNF."""
    return "::=" not in text


def lark_to_ebnf(definition: str) -> str:
    """The xgrammar EBNF admitting exactly the strings the Lark grammar ``definition`` admits
    from its ``start`` rule."""
    if not isinstance(definition, str) or not definition.strip():
        raise GrammarSyntaxError("not valid Lark: the grammar is empty; define at least `start: ...`")
    grammar = resolve(parse_lark(definition))
    names = reachable(grammar)
    check_lexing(grammar, [name for name in names if not name.lstrip("_")[:1].isupper()])
    return emit_grammar(grammar, names)


def regex_to_ebnf(pattern: str) -> str:
    """The EBNF of a Python ``re`` pattern, matched whole (``re.fullmatch``), no flags."""
    return f"root ::= {node_ebnf(parse_regex(pattern, '', f'regex {pattern!r}'))}\n"


def choice_to_ebnf(choices: Sequence[str]) -> str:
    """``root ::= "a" | "b" | ...``: exactly one of ``choices`` (duplicates are fine)."""
    if isinstance(choices, str) or not choices:
        raise GrammarSyntaxError("choice needs a non-empty list of strings")
    for i, choice in enumerate(choices):
        if not isinstance(choice, str):
            raise GrammarSyntaxError(f"choice {i} is not a string: {choice!r}")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in choice):
            message = f"choice {i} holds a lone surrogate, which cannot be output as UTF-8; remove it"
            raise UnsupportedGrammarError(message, construct="surrogate code point")
    return "root ::= " + " | ".join(literal(choice) for choice in dict.fromkeys(choices)) + "\n"

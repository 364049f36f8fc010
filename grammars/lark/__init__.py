"""The Lark translator: Lark grammars (the subset OpenAI documents for custom tools),
regexes and choice lists as exact xgrammar EBNF, and custom-tool input as a JSON string.

``translate.py`` is the entry; ``syntax.py``/``literals.py`` parse Lark, ``regex.py`` parses
regexes, ``nodes.py`` is the node algebra, ``automata.py``/``lexing.py`` check Lark's lexing
is reproduced exactly, ``ebnf.py`` writes EBNF, ``common.py`` resolves rules;
``custom_tool_json.py`` wraps a custom tool's grammar in ``{"input": "..."}``.
"""

from grammars.lark.custom_tool_json import ARGUMENTS_PREFIX, InputStream, custom_arguments_ebnf
from grammars.lark.translate import choice_to_ebnf, is_probably_lark, lark_to_ebnf, regex_to_ebnf

__all__ = [
    "ARGUMENTS_PREFIX",
    "InputStream",
    "choice_to_ebnf",
    "custom_arguments_ebnf",
    "is_probably_lark",
    "lark_to_ebnf",
    "regex_to_ebnf",
]

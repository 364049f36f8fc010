"""Tool-call grammars: the structural tag per tool format and mode (``constraint.py``), with
the arguments of pythonic calls (``pythonic.py``) and of the XML call formats (``xml_calls.py``).
"""

from grammars.tool_calls.constraint import (
    CALL_WHITESPACE_LIMIT,
    EMPTY_PARAMETERS,
    Constraint,
    ToolConstraintError,
    ToolSpec,
    tool_call_constraint,
)
from grammars.tool_calls.pythonic import PythonicSchemaError
from grammars.tool_calls.xml_calls import XmlSchemaError

__all__ = [
    "CALL_WHITESPACE_LIMIT",
    "EMPTY_PARAMETERS",
    "Constraint",
    "PythonicSchemaError",
    "ToolConstraintError",
    "ToolSpec",
    "XmlSchemaError",
    "tool_call_constraint",
]

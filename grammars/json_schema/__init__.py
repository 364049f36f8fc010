"""The JSON-Schema policy: which schemas are served exactly, and how outputs are validated.

``check_schema`` is the policy (``policy.py``); ``keywords.py`` the keyword table;
``rules.py`` per-subschema rules; ``canonical.py`` subschema walks, JSON pointers,
``$ref`` following and canonical text; ``access.py`` typed reads; ``productive.py``
subschemas no finite value completes; ``patterns.py`` client regexes on RE2;
``validation.py`` Draft 2020-12 validation with those regexes.
"""

from grammars.json_schema.canonical import canonical_json, deref, iter_subschemas, json_equal
from grammars.json_schema.policy import (
    JSON_OBJECT_SCHEMA,
    KEYWORDS,
    SGLANG_FORMATS,
    CheckedSchema,
    KeywordSupport,
    SchemaLimits,
    check_schema,
    loosen_deferred,
)
from grammars.json_schema.validation import LinearValidator, first_error

__all__ = [
    "JSON_OBJECT_SCHEMA",
    "KEYWORDS",
    "SGLANG_FORMATS",
    "CheckedSchema",
    "KeywordSupport",
    "LinearValidator",
    "SchemaLimits",
    "canonical_json",
    "check_schema",
    "loosen_deferred",
    "deref",
    "first_error",
    "iter_subschemas",
    "json_equal",
]

"""Tool-call structural tags and JSON schemas as llguidance Lark: the same language, compiled lazily.

Pure: builds text only (imports neither torch, sglang, fastapi nor llguidance).

``grammars.tool_calls.constraint`` builds an xgrammar structural tag; xgrammar builds a token mask
for every counted position of a bounded string up front (a 64-tool set takes seconds,
docs/benchmarks.md), while llguidance builds masks as the parser reaches
them. This module translates the structural-tag elements ``grammars.tool_calls.constraint`` emits
into one Lark grammar for llguidance 1.9.1 (its docs/syntax.md):

- ``const_string`` -> a string literal; where it spells an added token of the tokenizer
  (Qwen's ``<tool_call>``; a special one such as gpt-oss's ``<|channel|>`` or Kimi's
  ``<|tool_call_begin|>``), that token, ``<[id]>``: the one token the model was trained to
  write. xgrammar also lets the model spell a non-special marker out; this narrows that away (a
  random model that spells ``</tool_call>`` can glue the next call's ``<`` to its ``>`` in one
  token, ``><``, which no trained model writes). A special token has no spelling llguidance
  would match (its bytes are not text), so a marker that is one is reachable only this way.
  Free text still may not spell a trigger: the parser would read it as a call;
- ``regex`` -> ``/…/``; ``sequence``, ``or``, ``star`` -> concatenation, ``|``, ``(…)*``;
  ``tag`` -> begin content end;
- ``json_schema`` -> ``%json {…}`` with the same whitespace rule (at most
  ``max_whitespace_cnt`` of xgrammar's JSON whitespace characters wherever JSON allows
  whitespace) and xgrammar's reading of the schema written out (:func:`strict_schema`);
  identical schemas share one rule. Only keywords in ``ROUTED_KEYWORDS``: their verdicts are
  compared between the two libraries on the schema corpora
  (``tests/grammars/test_llguidance_json.py``);
- ``any_text`` with ``excludes`` -> a terminal ``/(?s:.*)/ & ~/(?s:.*)(…)(?s:.*)/``
  (llguidance's and/not operators);
- ``triggered_tags`` (one trigger, one tag opening with it, ``stop_after_first``) ->
  text that never contains the trigger, or text up to the first trigger (a lazy
  lexeme) followed by the rest of the tag.

Anything else (an EBNF ``grammar`` element: pythonic arguments, custom tools) raises
:class:`NotExpressible`; the caller keeps the xgrammar structural tag for it.
:func:`json_schema_to_lark` does the same for a ``response_format`` schema, with SGLang's
exact JSON whitespace.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Mapping

from grammars.json_schema.canonical import iter_subschemas
from runtime_ext.grammar_route import LARK_HEADER

__all__ = [
    "LARK_HEADER",
    "NotExpressible",
    "json_schema_to_lark",
    "native_json_schema_to_lark",
    "strict_schema",
    "structural_tag_to_lark",
    "text_tokens",
]

JSON_WHITESPACE = " \\t\\n\\r"
"""xgrammar's JSON whitespace characters (its ``json_schema`` element), as a regex class body."""
_ANY = "/(?s:.*)/"
ROUTED_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "enum", "const", "anyOf", "minLength", "maxLength", "minItems", "maxItems",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$defs", "definitions", "$ref",
        "description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
        "writeOnly", "$schema", "$id", "format", "pattern",
    }
)  # fmt: skip


NON_MONOTONE = frozenset({"not", "if", "then", "else", "oneOf"})
"""Keywords under which narrowing a subschema (strict mode written out) can admit more
instances: ``not`` and ``if`` negate, ``oneOf`` counts matches."""


class NotExpressible(ValueError):
    """The grammar holds an element or keyword this translation does not cover."""


def text_tokens(tokenizer_json: Mapping[str, Any]) -> dict[str, int]:
    """The added tokens of a Hugging Face ``tokenizer.json``, special or not (text -> id): what a
    literal of the grammar that spells one becomes, ``<[id]>`` (llguidance matches an added token
    only that way)."""
    added = tokenizer_json.get("added_tokens") or []
    return {t["content"]: int(t["id"]) for t in added if t.get("content")}


_TYPED_BY = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems"}),
}


def full_match(pattern: str) -> str:
    """``pattern`` anchored at both ends (the policy allows anchors only there)."""
    core = pattern[1:] if pattern.startswith("^") else pattern
    if core.endswith("$"):
        backslashes = len(core) - 1 - len(core[:-1].rstrip("\\"))
        core = core[:-1] if backslashes % 2 == 0 else core  # an anchor, not an escaped "$"
    return f"^(?:{core})$"


def strict_schema(schema: Mapping[str, Any], *, routed_only: bool = True) -> dict[str, Any]:
    """``schema`` with xgrammar's ``strict_mode`` (how SGLang compiles) written out, for
    llguidance, which follows JSON Schema's defaults: an object schema with ``properties``
    and no ``additionalProperties`` allows no other key; an array schema with ``prefixItems``
    and no ``items`` no further item.
    A schema without ``type`` that uses object (array) keywords admits only objects
    (arrays), and a ``pattern`` must match the whole string, as xgrammar compiles them
    (llguidance follows JSON Schema: a pattern matches anywhere in the string).
    Raises :class:`NotExpressible` for a keyword outside ``ROUTED_KEYWORDS``; with
    ``routed_only`` False (llguidance's own compiler enforces every other keyword it takes) only
    for a keyword under which a narrower subschema can widen the whole (``NON_MONOTONE``)."""
    out = copy.deepcopy(dict(schema))
    for node in iter_subschemas(out):
        value = node.value
        if not isinstance(value, dict):
            continue
        unknown = sorted(set(value) - ROUTED_KEYWORDS if routed_only else set(value) & NON_MONOTONE)
        if unknown:
            raise NotExpressible(f"keyword {unknown[0]!r} at {node.pointer or '/'} is not routed to llguidance")
        kinds = [kind for kind, words in _TYPED_BY.items() if words & set(value)]
        if "type" not in value and kinds:
            if len(kinds) > 1:
                raise NotExpressible(f"object and array keywords without a type at {node.pointer or '/'}")
            value["type"] = kinds[0]
        if isinstance(value.get("pattern"), str):
            value["pattern"] = full_match(value["pattern"])
        if "properties" in value:  # (unevaluated* are not routed: only these two can be set)
            value.setdefault("additionalProperties", False)
        if "prefixItems" in value:
            value.setdefault("items", False)
    return out


def _quoted(text: str) -> str:
    """A Lark string literal matching exactly ``text`` (JSON escapes are Lark escapes)."""
    return json.dumps(text, ensure_ascii=False)


def _regex_body(pattern: str) -> str:
    return pattern.replace("/", "\\/")


class _Translator:
    def __init__(self, tokens: Mapping[str, int]) -> None:
        self.rules: list[str] = []
        self.json_rules: dict[str, str] = {}  # one rule per distinct argument schema
        self.tokens = {text: tid for text, tid in tokens.items() if text}
        self._split = re.compile("|".join(re.escape(t) for t in sorted(self.tokens, key=len, reverse=True)))

    def literal(self, text: str) -> str:
        """``text``, where each added token's text is that token (``<[id]>``)."""
        if not text:
            return ""
        if not self.tokens:
            return _quoted(text)
        parts, at = [], 0
        for match in self._split.finditer(text):
            parts += [_quoted(text[at : match.start()])] if match.start() > at else []
            parts.append(f"<[{self.tokens[match.group()]}]>")
            at = match.end()
        parts += [_quoted(text[at:])] if at < len(text) else []
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"

    def rule(self, prefix: str, body: str) -> str:
        name = f"{prefix}{len(self.rules)}"
        self.rules.append(f"{name}: {body}")
        return name

    def expr(self, element: Mapping[str, Any]) -> str:
        kind = element.get("type")
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise NotExpressible(f"structural-tag element {kind!r} has no llguidance translation")
        return str(method(element))

    def _join(self, parts: list[str]) -> str:
        kept = [p for p in parts if p]
        return "(" + " ".join(kept) + ")" if kept else '""'

    def _const_string(self, e: Mapping[str, Any]) -> str:
        return self.literal(e["value"])

    def _regex(self, e: Mapping[str, Any]) -> str:
        return f"/{_regex_body(e['pattern'])}/"

    def _sequence(self, e: Mapping[str, Any]) -> str:
        return self._join([self.expr(x) for x in e["elements"]])

    def _or(self, e: Mapping[str, Any]) -> str:
        return "(" + " | ".join(self.expr(x) or '""' for x in e["elements"]) + ")"

    def _star(self, e: Mapping[str, Any]) -> str:
        return f"({self.expr(e['content'])})*"

    def _tag(self, e: Mapping[str, Any]) -> str:
        content = self.expr(e["content"])
        return self._join([self.literal(e["begin"]), content, self.literal(e["end"])])

    def _json_schema(self, e: Mapping[str, Any]) -> str:
        schema = e["json_schema"]
        if not isinstance(schema, Mapping) or "x-guidance" in schema:
            raise NotExpressible("a json_schema element must be an object schema without x-guidance")
        count = e.get("max_whitespace_cnt")
        ws = f"[{JSON_WHITESPACE}]" + ("*" if count is None else f"{{0,{int(count)}}}")
        body = _json_body(schema, {"whitespace_flexible": True, "whitespace_pattern": ws})
        if body not in self.json_rules:
            self.json_rules[body] = self.rule("json", f"%json {body}")
        return self.json_rules[body]

    def _any_text(self, e: Mapping[str, Any]) -> str:
        excludes = [x for x in e.get("excludes", ()) if x]
        if not excludes:
            return self.rule("TEXT", _ANY)
        alternatives = "|".join(re.escape(x) for x in excludes)
        return self.rule("TEXT", f"{_ANY} & ~/(?s:.*)({_regex_body(alternatives)})(?s:.*)/")

    def _triggered_tags(self, e: Mapping[str, Any]) -> str:
        triggers, tags = e.get("triggers", []), e.get("tags", [])
        if len(triggers) != 1 or len(tags) != 1 or not e.get("stop_after_first") or e.get("at_least_one"):
            raise NotExpressible("triggered_tags: only one trigger, one tag and stop_after_first are translated")
        trigger, tag = triggers[0], tags[0]
        if not trigger or not tag["begin"].startswith(trigger):
            raise NotExpressible("triggered_tags: the tag must begin with its trigger")
        free = self._any_text({"excludes": [trigger]})
        if trigger in self.tokens:  # text without the trigger's spelling, then the trigger token
            head = f"{free} <[{self.tokens[trigger]}]>"
        else:  # text up to the first trigger (a lazy lexeme)
            head = f"head{len(self.rules)}"
            self.rules.append(f"{head}[lazy]: {_ANY} {_quoted(trigger)}")
        rest = dict(tag, begin=tag["begin"][len(trigger) :])
        return f"({free} | {head} {self._tag(rest)})"


def _json_body(schema: Mapping[str, Any], options: Mapping[str, Any], routed_only: bool = True) -> str:
    body = {"x-guidance": options, **strict_schema(schema, routed_only=routed_only)}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


SGLANG_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""JSON exactly as SGLang's xgrammar emits it with ``constrained_json_disable_any_whitespace``
(how the service starts SGLang): ``", "`` and ``": "``, no other whitespace."""


def json_schema_to_lark(schema: Mapping[str, Any]) -> str:
    """A ``response_format`` schema (the policy's checked schema) as llguidance Lark: the same
    JSON text as SGLang's xgrammar ``json_schema`` (``SGLANG_JSON``, ``strict_schema``)."""
    return LARK_HEADER + f"start: json0\njson0: %json {_json_body(schema, SGLANG_JSON)}\n"


def closed_json_schema_to_lark(schema: Mapping[str, Any]) -> str:
    """A ``response_format`` schema with keywords outside ``ROUTED_KEYWORDS`` (the policy passed
    it: xgrammar enforces them exactly or narrower) for llguidance's own compiler, with strict
    mode written out as in ``json_schema_to_lark``: narrower than JSON Schema, never looser, as
    xgrammar would serve it. Raises :class:`NotExpressible` (``strict_schema``)."""
    return LARK_HEADER + f"start: json0\njson0: %json {_json_body(schema, SGLANG_JSON, routed_only=False)}\n"


def native_json_schema_to_lark(schema: Mapping[str, Any]) -> str:
    """A schema only llguidance's own JSON Schema compiler may enforce (the policy's
    ``CheckedSchema.unenforced``): passed as it is, with JSON Schema's own semantics (a
    ``pattern`` matches anywhere, undeclared properties are allowed unless the schema says
    otherwise), and SGLang's JSON spacing. llguidance refuses what it cannot enforce."""
    body = json.dumps({"x-guidance": SGLANG_JSON, **schema}, ensure_ascii=False, separators=(",", ":"))
    return LARK_HEADER + f"start: json0\njson0: %json {body}\n"


def structural_tag_to_lark(value: str | Mapping[str, Any], tokens: Mapping[str, int] | None = None) -> str:
    """The llguidance Lark grammar accepting the structural tag's language.

    ``value``: the ``{"type": "structural_tag", "format": …}`` object or its JSON text.
    ``tokens``: text -> id of the tokenizer's added tokens (see the module doc).
    Raises :class:`NotExpressible` for elements outside the translated subset.
    """
    tag = json.loads(value) if isinstance(value, str) else value
    if tag.get("type") != "structural_tag" or "format" not in tag:
        raise NotExpressible("not an xgrammar structural tag ({'type': 'structural_tag', 'format': …})")
    translator = _Translator(tokens or {})
    start = translator.expr(tag["format"])
    return LARK_HEADER + "\n".join([f"start: {start}", *translator.rules]) + "\n"

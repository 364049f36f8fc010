"""Grammar building for structured generation (JSON schema, tool calls, Lark, reasoning).

Pure logic on top of xgrammar and llguidance: imports neither torch, sglang nor fastapi.
Rooms (each exports its public API from its ``__init__``):

- ``grammars.json_schema``: the JSON-Schema policy (which keywords are enforced exactly,
  canonical form, ``$ref`` walks, productivity, RE2 patterns, Draft 2020-12 validation).
- ``grammars.lark``: Lark (OpenAI's custom-tool subset), regexes and choices as EBNF.
- ``grammars.compile``: the bounded xgrammar compiler and the llguidance route.
- ``grammars.tool_calls``: tool-call constraints per tool format (JSON, pythonic, XML).

``grammars.errors`` (the error types) and ``grammars.bounded_cache`` are shared by all.
"""

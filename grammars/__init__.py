"""Grammar building for structured generation (JSON schema, tool calls, reasoning).

Pure logic on top of xgrammar: imports neither torch, sglang nor fastapi.
Filled in by the structured-generation issue.
"""

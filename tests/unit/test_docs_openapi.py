"""The docs site's OpenAPI page is built from the app itself (no engine): every route the app serves
is a row, and each request body's fields are listed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("docs_openapi", ROOT / "scripts" / "docs_openapi.py")
assert spec and spec.loader
docs_openapi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_openapi)


def test_the_page_lists_every_route_and_the_chat_request_fields():
    schema = docs_openapi.openapi_schema()
    page = docs_openapi.markdown(schema)
    for path, ops in schema["paths"].items():
        for method in ops:
            assert f"| {method.upper()} | `{path}` |" in page, (method, path)
    assert "/v1/chat/completions" in schema["paths"] and "## ChatCompletionRequest" in page
    chat = schema["components"]["schemas"]["ChatCompletionRequest"]
    for field in ("model", "messages", "response_format", "tools", "max_reasoning_tokens"):
        assert field in chat["properties"] and f"| `{field}` |" in page, field
    assert "| `messages` | array of `ChatMessage` | yes |" in page

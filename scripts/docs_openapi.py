"""MkDocs hook: the OpenAPI schema of the service, built from the FastAPI app without an engine.

`mkdocs build` adds two generated pages: ``reference/openapi.json`` (the schema, as `GET
/openapi.json` serves it) and ``reference/openapi.md`` (each route with its request body's fields).
Nothing is written into docs/, so the schema on the site is always the code's.

    .venv/bin/python scripts/docs_openapi.py > openapi.json    # the schema alone
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
JSON_URI = "reference/openapi.json"
PAGE_URI = "reference/openapi.md"


def openapi_schema() -> dict[str, Any]:
    """The app's schema; the app is built but not started, so no engine or model is loaded."""
    sys.path.insert(0, str(ROOT))
    from service.main import create_app
    from service.settings import Settings

    app = create_app(Settings(), Path("/nonexistent-model"), "model")
    return app.openapi()


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return "`" + schema["$ref"].rsplit("/", 1)[-1] + "`"
    if "anyOf" in schema:
        return " \\| ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return "array of " + _type(schema.get("items", {}))
    if "const" in schema:
        return "`" + json.dumps(schema["const"]) + "`"
    if "enum" in schema:
        return " \\| ".join("`" + json.dumps(v) + "`" for v in schema["enum"])
    return str(schema.get("type", "any"))


def _fields(name: str, components: dict[str, Any]) -> list[str]:
    schema = components.get(name, {})
    required = set(schema.get("required", []))
    rows = ["| field | type | required |", "|---|---|---|"]
    for field, sub in schema.get("properties", {}).items():
        rows.append(f"| `{field}` | {_type(sub)} | {'yes' if field in required else ''} |")
    return rows


def markdown(schema: dict[str, Any]) -> str:
    components = schema.get("components", {}).get("schemas", {})
    lines = [
        "# OpenAPI schema",
        "",
        f"Generated from the service's FastAPI app ({schema['info']['title']} {schema['info']['version']})"
        " when the site is built. A running server serves the same schema at `GET /openapi.json` and"
        " an interactive page at `GET /docs`. Download: [openapi.json](openapi.json).",
        "",
        "Bad input is a 400 in the API's own error envelope naming the field"
        " ([API reference](../api.md)); the schema's 422 entries are FastAPI's generic ones.",
        "",
        "| method | path | summary | request body |",
        "|---|---|---|---|",
    ]
    bodies: list[str] = []
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            ref = body.get("$ref", "").rsplit("/", 1)[-1]
            lines.append(f"| {method.upper()} | `{path}` | {op.get('summary', '')} | {f'`{ref}`' if ref else ''} |")
            if ref and ref not in bodies:
                bodies.append(ref)
    for ref in bodies:
        lines += ["", f"## {ref}", "", *_fields(ref, components)]
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """MkDocs event: add the generated schema and its page to the site."""
    from mkdocs.structure.files import File

    schema = openapi_schema()
    files.append(File.generated(config, JSON_URI, content=json.dumps(schema, indent=2) + "\n"))
    files.append(File.generated(config, PAGE_URI, content=markdown(schema)))
    return files


if __name__ == "__main__":
    print(json.dumps(openapi_schema(), indent=2))

"""The quickstart page's tool-call and JSON-schema examples run as written against a real server (only
the address changes): the call is get_weather with schema-valid arguments, the JSON parses and has
the schema's required keys."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
DEFAULT = "http://127.0.0.1:8000"


def example(heading: str) -> str:
    """The one python block under ``## heading``."""
    section = QUICKSTART.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def run(code: str, server) -> list[str]:
    assert DEFAULT in code and server.model_name in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(DEFAULT, server.base_url), "quickstart.md", "exec"), {})
    return printed.getvalue().strip().splitlines()


def test_the_first_tool_call_example_prints_a_schema_valid_call(smol_server):
    [line] = run(example("First tool call"), smol_server)
    name, arguments = line.split(" ", 1)
    args = ast.literal_eval(arguments)  # the example prints the parsed arguments dict
    assert name == "get_weather" and set(args) == {"city", "unit"}, line
    assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit"), line


def test_the_first_json_schema_example_prints_the_schemas_object(smol_server):
    [line] = run(example("First JSON schema"), smol_server)
    value = ast.literal_eval(line)
    assert set(value) == {"city", "country"} and all(isinstance(v, str) for v in value.values()), line
    json.dumps(value)

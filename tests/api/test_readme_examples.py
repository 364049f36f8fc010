"""The README's "Use it" examples run as written against a real server (only the address changes):
the curl command answers in JSON, and the Python example prints the answer, the streamed haiku
and the usage, with no ``None`` where a chunk carries no text."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
DEFAULT = "http://127.0.0.1:8000"


def examples(language: str) -> list[str]:
    """The README's fenced ``language`` blocks of the "Use it" section."""
    section = README.read_text().split("## Use it", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def test_the_curl_example_answers(smol_server):
    [command] = examples("bash")
    assert DEFAULT in command and smol_server.model_name in command
    out = subprocess.run(
        ["bash", "-c", command.replace(DEFAULT, smol_server.base_url)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["choices"][0]["message"]["content"]


def test_the_python_example_prints_text_and_usage_and_no_none(smol_server):
    [code] = examples("python")
    assert DEFAULT in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(DEFAULT, smol_server.base_url), "README.md", "exec"), {})
    text = printed.getvalue()
    assert "None" not in text, text
    assert re.search(r"\d+ prompt \+ \d+ completion tokens", text) and len(text.strip().splitlines()) >= 3, text

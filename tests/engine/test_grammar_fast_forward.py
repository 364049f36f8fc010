"""Grammar fast-forward keeps constrained greedy decoding exact and saves decode steps: the same
JSON-schema requests on SmolLM2 (float32, llguidance, overlap off) with it on and off give the
same text, token counts and finish reasons, every output is valid against its schema, a streamed
request's chunks add up to its text, and the run with it on takes fewer decode forward passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.engine.together import together

pytestmark = pytest.mark.timeout(1200)  # one test runs two engines side by side

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 16},
        "languages": {"type": "array", "items": {"enum": ["python", "rust", "french"]}, "maxItems": 2},
    },
    "required": ["name", "age", "city", "languages"],
    "additionalProperties": False,
}
CALL = {
    "type": "object",
    "properties": {
        "name": {"enum": ["get_weather_forecast"]},
        "arguments": {
            "type": "object",
            "properties": {"location": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius"]}},
            "required": ["location", "unit"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
PROMPTS = ["Describe a software engineer from Paris as JSON.", "What is the weather in Oslo? Call the tool."]
CASES = [
    {"prompt": PROMPTS[0], "schema": PERSON, "max_new_tokens": 80},
    {"prompt": PROMPTS[1], "schema": CALL, "max_new_tokens": 80},
    {"prompt": "Invent a person as JSON.", "schema": PERSON, "max_new_tokens": 80},
    {"prompt": PROMPTS[1], "schema": CALL, "max_new_tokens": 9},  # the cap lands inside a forced span
    {"prompt": PROMPTS[0], "schema": CALL, "max_new_tokens": 80, "stream": True},
]


def run(model_dir: Path, mode: str) -> tuple[list[dict], dict]:
    script = Path(__file__).with_name("sglang_fast_forward.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), mode, json.dumps(CASES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in proc.stdout.splitlines() if " " in l}
    assert "OUTPUTS" in lines, f"engine run failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(lines["OUTPUTS"]), json.loads(lines["FAST_FORWARD"])


def test_fast_forward_same_outputs_fewer_decode_steps(assets):
    (off, off_report), (on, on_report) = together(lambda: run(assets.smollm2, "off"), lambda: run(assets.smollm2, "on"))
    for case, out in zip(CASES, on):
        if out["finish"] == "stop":
            jsonschema.validate(json.loads(out["text"]), case["schema"])
        else:  # only the capped case may stop on length, and never past its cap
            assert case["max_new_tokens"] < 20 and out["finish"] == "length"
        assert out["completion_tokens"] <= case["max_new_tokens"]
        if out["streamed"]:  # the stream's increments carried every token, forced ones too
            assert len(out["output_ids"]) == out["completion_tokens"]
    assert [o["text"] for o in on] == [o["text"] for o in off]
    assert [o["output_ids"] for o in on] == [o["output_ids"] for o in off]
    assert [(o["completion_tokens"], o["finish"]) for o in on] == [(o["completion_tokens"], o["finish"]) for o in off]
    assert on_report["inactive_reason"] == "" and on_report["forced_tokens"] > 0
    assert off_report["spans"] == 0
    assert on_report["decode_steps"] < off_report["decode_steps"]
    assert on_report["forward_passes"] < off_report["forward_passes"]
    assert on_report["mixed_steps"] > 0 == off_report["mixed_steps"]  # spans rode along the running decodes
    assert on_report["extend_decode_rows"] > off_report["extend_decode_rows"] == 0  # as decode rows

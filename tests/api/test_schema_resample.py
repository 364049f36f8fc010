"""Validate and resample on SmolLM2 (real engine, real HTTP): a schema whose grammar is looser
than the schema (``uniqueItems`` dropped from it by ``allow_schema_loosening``) has its invalid
outputs generated again with the seed advanced; ``usage.schema_attempts`` reports the
generations, and a seeded request repeats exactly, attempts included."""

from __future__ import annotations

import json
from typing import Any

import httpx

SCHEMA = {
    "type": "array",
    "items": {"type": "integer", "enum": [1, 2, 3]},
    "minItems": 3,
    "maxItems": 3,
    "uniqueItems": True,
}
SEEDS = range(6)


def _ask(server: Any, seed: int) -> dict[str, Any]:
    body = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": "Write three numbers, each 1, 2 or 3, as a JSON array."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "three", "schema": SCHEMA}},
        "allow_schema_loosening": True,
        "temperature": 1.0,
        "seed": seed,
        "max_tokens": 24,
    }
    resp = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def test_invalid_outputs_are_resampled_and_the_attempts_reported(smol_server: Any) -> None:
    answers = {seed: _ask(smol_server, seed) for seed in SEEDS}
    attempts = {seed: a["usage"]["schema_attempts"] for seed, a in answers.items()}
    for seed, answer in answers.items():
        choice = answer["choices"][0]
        assert 1 <= attempts[seed] <= 3, (seed, answer["usage"])  # one generation + at most 2 retries
        items = json.loads(choice["message"]["content"])  # the grammar still forces 3 of 1..3
        valid = len(set(items)) == 3
        assert choice["schema_validation"]["valid"] is valid, (seed, choice)
        if not valid:  # only after the whole budget
            assert attempts[seed] == 3, (seed, choice, answer["usage"])
    assert any(n > 1 for n in attempts.values()), f"no output needed a retry: {attempts}"
    assert sum(len(set(json.loads(a["choices"][0]["message"]["content"]))) == 3 for a in answers.values()) > sum(
        n == 1 for n in attempts.values()
    ), f"retries made no output valid: {attempts}"
    again = _ask(smol_server, next(s for s, n in attempts.items() if n > 1))
    first = answers[next(s for s, n in attempts.items() if n > 1)]
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert again["usage"]["schema_attempts"] == first["usage"]["schema_attempts"]

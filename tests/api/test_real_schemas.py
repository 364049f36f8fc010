"""Fifty JSON Schemas from real projects (``assets/real_schemas.py``: SchemaStore's CI/config
schemas as check-jsonschema vendors them, Jupyter's notebook format, validate-pyproject's, JupyterLab's
settings) sent as ``response_format`` to SmolLM2 over HTTP, 16 at a time, sampled (temperature 0.8,
a seed), so schemas the grammar cannot wholly enforce take the validate-and-resample path.

Each schema gets a 200, a 400 that says what to change, or a 422 (resampling exhausted: never an
invalid output returned as valid); never a 5xx. Every finished 200 validates, by the validator of the
draft the schema declares, and its ``schema_validation`` says so; resampled ones report their
generations in ``usage.schema_attempts``. The table goes to the log; counts are asserted against
floors measured on this model (docs/structured-outputs.md has the run).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from jsonschema.validators import validator_for

MAX_TOKENS = 96


@dataclass
class Outcome:
    name: str
    status: int
    finish: str = ""
    attempts: int = 0
    error: str = ""


@pytest.fixture(scope="module")
def real_schemas() -> dict[str, dict]:
    from assets import default_cache_dir
    from assets.real_schemas import real_schema_files

    return {name: json.loads(path.read_text()) for name, path in real_schema_files(default_cache_dir()).items()}


def _ask(server, name: str, schema: dict) -> Outcome:
    body = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": f"Write a short example {name.split('/')[-1]} file as JSON."}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.8,
        "seed": 7,
        "response_format": {"type": "json_schema", "json_schema": {"name": "config", "schema": schema}},
    }
    resp = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=600)
    assert resp.status_code < 500, f"{name}: {resp.status_code} {resp.text[:500]}"
    if resp.status_code != 200:
        error = resp.json()["error"]
        assert error["message"] and error["param"].startswith("response_format"), (name, error)
        return Outcome(name, resp.status_code, error=f"{error['code']}: {error['message'][:90]}")
    choice, usage = resp.json()["choices"][0], resp.json()["usage"]
    verdict = choice["schema_validation"]
    if choice["finish_reason"] == "stop":
        output = json.loads(choice["message"]["content"])
        errors = [e.message[:200] for e in validator_for(schema)(schema).iter_errors(output)]
        assert not errors and verdict["valid"], (name, errors, verdict, choice["message"]["content"][:400])
    else:
        assert choice["finish_reason"] == "length" and "truncated" in (verdict["error"] or ""), (name, verdict)
    return Outcome(name, 200, choice["finish_reason"], usage.get("schema_attempts") or 0)


def _table(outcomes: list[Outcome]) -> str:
    lines = [f"{'schema':44} status finish attempts  error"]
    lines += [f"{o.name:44} {o.status:6} {o.finish:6} {o.attempts:8}  {o.error}" for o in outcomes]
    return "\n".join(lines)


def test_real_schemas_served_outputs_validate_smollm2(smol_server, real_schemas):
    assert len(real_schemas) == 50
    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda item: _ask(smol_server, *item), real_schemas.items()))
    print(_table(outcomes))
    served = [o for o in outcomes if o.status == 200]
    finished = [o for o in outcomes if o.finish == "stop"]
    resampled = [o for o in outcomes if o.attempts]
    # measured: 43 served (7 refused with a 400; taskfile's oneOf took 3 generations, a 422 in an
    # earlier run), 26 finished within 96 tokens, all valid; 21 through validate-and-resample
    assert len(served) >= 38, _table(outcomes)
    assert len(finished) >= 20, _table(outcomes)
    assert len(resampled) >= 10, _table(outcomes)  # the validate-and-resample path ran and said so

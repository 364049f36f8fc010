"""A schema regex built for catastrophic backtracking does not stall the server: ``^(a+)+$``
against a property name ``"aaa…ab"`` takes Python's ``re`` 2^n steps (tens of seconds for this name,
holding the GIL), and the service matches it twice per request: when the policy checks the
declared names against ``patternProperties`` (request time) and when it validates the output.

The request reaches both: the pattern matches the declared property ``aaaa``, so the grammar
cannot enforce it and loosening (on for ``fault_server``) drops it from the grammar; the grammar
then forces ``{"aaa…ab": <bool>, "aaaa": <bool>}`` (``additionalProperties: false``: no
other member under either schema semantics), and the post-validation matches the pattern
against both names (``aaaa``'s boolean is not the string the pattern's schema asks for: the
verdict shows the pattern was matched). Eight small requests sent while it runs have the same
median latency (≤ 2× + 0.5 s) as eight sent while the same request with the harmless pattern
``^a+$`` runs (the same loosened grammar, the same engine work: only the matching differs).
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.faults.conftest import KEY_A, KEY_B

pytestmark = pytest.mark.timeout(600)
CATASTROPHIC, HARMLESS = "^(a+)+$", "^a+$"
NAME = "a" * 29 + "b"
SMALL = 8


def schema(pattern: str) -> dict:
    return {
        "type": "object",
        "properties": {NAME: {"type": "boolean"}, "aaaa": {"type": "boolean"}},
        "required": [NAME, "aaaa"],
        "patternProperties": {pattern: {"type": "string"}},
        "additionalProperties": False,
    }


def chat(server, key: str, timeout: float = 120, **fields) -> httpx.Response:
    body = {"model": server.model_name, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 2}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body | fields, headers=headers, timeout=timeout)


def small_latencies(server) -> list[float]:
    """Seconds of ``SMALL`` one-token-ish requests sent at once."""

    def one(_: int) -> float:
        began = time.perf_counter()
        reply = chat(server, KEY_B, timeout=60)
        assert reply.status_code == 200, reply.text
        return time.perf_counter() - began

    with ThreadPoolExecutor(SMALL) as pool:
        return list(pool.map(one, range(SMALL)))


def structured(server, pattern: str) -> httpx.Response:
    fmt = {"type": "json_schema", "json_schema": {"name": "names", "schema": schema(pattern)}}
    return chat(server, KEY_A, response_format=fmt, max_tokens=64, temperature=0)


def median_beside(server, pattern: str) -> tuple[float, httpx.Response]:
    """The median latency of ``SMALL`` small requests sent while a structured request with
    ``pattern`` is served, and that request's reply."""
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(reply=structured(server, pattern)))
    worker.start()
    time.sleep(0.05)  # the structured request is in: its policy check runs now
    median = statistics.median(small_latencies(server))
    worker.join(300)
    return median, result["reply"]


def test_a_catastrophic_pattern_does_not_stall_other_requests(fault_server):
    assert structured(fault_server, HARMLESS).status_code == 200  # warm: the scheduler builds the grammar
    baseline, _ = median_beside(fault_server, HARMLESS)
    during, reply = median_beside(fault_server, CATASTROPHIC)

    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert choice["message"]["content"].startswith(f'{{"{NAME}": ')
    verdict = choice["schema_validation"]
    assert verdict["valid"] is False and "/aaaa" in verdict["error"], verdict  # the pattern was matched
    assert during <= 2 * baseline + 0.5, f"median {during:.2f} s beside the catastrophic pattern, {baseline:.2f} s"

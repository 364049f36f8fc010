"""Production behaviour of a real ``structserve serve`` process (tiny Qwen3) configured with API
keys, a small body limit, a tight running/queued bound and a per-key rate limit: each refusal
has its status and the OpenAI error envelope; request ids; JSON logs; the serving metrics.
The last test sends SIGTERM under load: in-flight and queued requests complete, new ones get 503, exit 0."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.server import ServerProcess

KEYS = ("sk-test-one", "sk-test-two", "sk-test-rate")
BODY_LIMIT = 32 * 1024


@pytest.fixture(scope="module")
def prod(assets, tmp_path_factory):
    keys_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys_file.write_text(f"# from a file\n{KEYS[2]}\n")
    server = ServerProcess(
        assets.qwen3_tiny,
        "prod",
        env={
            "STRUCTSERVE_DTYPE": "float32",
            "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false",
            "STRUCTSERVE_API_KEYS": f"{KEYS[0]},{KEYS[1]}",
            "STRUCTSERVE_API_KEYS_FILE": str(keys_file),
            "STRUCTSERVE_LIMITS__MAX_BODY_BYTES": str(BODY_LIMIT),
            "STRUCTSERVE_LIMITS__MAX_RUNNING": "2",
            "STRUCTSERVE_LIMITS__MAX_QUEUED": "1",
            "STRUCTSERVE_LIMITS__RETRY_AFTER_S": "3",
            "STRUCTSERVE_LIMITS__RATE_LIMIT_PER_MINUTE": "30",
            "STRUCTSERVE_LIMITS__RATE_LIMIT_BURST": "40",
            "STRUCTSERVE_DRAIN_TIMEOUT_S": "60",
        },
    )
    server.start()
    yield server
    server.stop()


def auth(key: str = KEYS[0]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat(server, max_tokens: int = 4, stream: bool = False) -> dict:
    return {
        "model": server.model_name,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": max_tokens,
        "stream": stream,
        "temperature": 0,
    }


def assert_envelope(resp: httpx.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code and error["message"]
    return error


def test_api_keys(prod):
    url = f"{prod.base_url}/v1/chat/completions"
    missing = httpx.post(url, json=chat(prod), timeout=30)
    assert "Bearer" in assert_envelope(missing, 401, "invalid_api_key")["message"]
    assert missing.headers["www-authenticate"] == "Bearer"
    assert_envelope(httpx.post(url, json=chat(prod), headers=auth("sk-nope"), timeout=30), 401, "invalid_api_key")
    assert_envelope(httpx.get(f"{prod.base_url}/v1/models", timeout=30), 401, "invalid_api_key")
    for key in KEYS:  # env keys and the file's key
        assert httpx.post(url, json=chat(prod), headers=auth(key), timeout=60).status_code == 200
    client = openai.OpenAI(base_url=f"{prod.base_url}/v1", api_key=KEYS[1])
    assert client.chat.completions.create(**chat(prod)).usage.completion_tokens >= 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{prod.base_url}/v1", api_key="sk-wrong").models.list()
    for path in ("/health", "/ready", "/metrics"):  # probes and scrapers need no key
        assert httpx.get(f"{prod.base_url}{path}", timeout=30).status_code == 200


def test_body_size_limit(prod):
    big = chat(prod) | {"messages": [{"role": "user", "content": "x" * (BODY_LIMIT + 1)}]}
    url = f"{prod.base_url}/v1/chat/completions"
    error = assert_envelope(httpx.post(url, json=big, headers=auth(), timeout=30), 413, "request_too_large")
    assert "max_body_bytes" in error["message"]
    chunks = (b" " * 4096 for _ in range(BODY_LIMIT // 4096 + 2))  # chunked, no Content-Length: counted
    assert_envelope(httpx.post(url, content=chunks, headers=auth(), timeout=30), 413, "request_too_large")
    assert httpx.post(url, json=chat(prod), headers=auth(), timeout=60).status_code == 200


def test_queue_bound_returns_429_with_retry_after(prod):
    """2 running + 1 queued fill the server; the next request is refused at once."""
    release = threading.Event()

    def hold() -> None:
        with httpx.Client(timeout=120) as client:
            with client.stream(
                "POST",
                f"{prod.base_url}/v1/chat/completions",
                headers=auth(KEYS[1]),
                json=chat(prod, max_tokens=3000, stream=True),
            ) as resp:
                for _ in resp.iter_lines():
                    if release.is_set():
                        break

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "structserve_requests_queued 1.0" not in _metrics(prod):
        time.sleep(0.1)
    assert "structserve_requests_running 2.0" in _metrics(prod)
    refused = httpx.post(f"{prod.base_url}/v1/chat/completions", json=chat(prod), headers=auth(), timeout=30)
    release.set()
    for t in threads:
        t.join(timeout=120)
    assert_envelope(refused, 429, "server_busy")
    assert refused.headers["retry-after"] == "3"
    assert (
        httpx.post(f"{prod.base_url}/v1/chat/completions", json=chat(prod), headers=auth(), timeout=60).status_code
        == 200
    )


def test_per_key_rate_limit(prod):
    statuses = [httpx.get(f"{prod.base_url}/v1/models", headers=auth(KEYS[2]), timeout=30) for _ in range(45)]
    limited = [r for r in statuses if r.status_code == 429]
    assert limited and sum(r.status_code == 200 for r in statuses) >= 35
    assert int(assert_envelope(limited[0], 429, "rate_limit_exceeded") and limited[0].headers["retry-after"]) >= 1
    assert httpx.get(f"{prod.base_url}/v1/models", headers=auth(KEYS[0]), timeout=30).status_code == 200


def test_request_ids_and_json_logs(prod):
    given = httpx.post(
        f"{prod.base_url}/v1/chat/completions",
        json=chat(prod),
        timeout=60,
        headers=auth() | {"X-Request-Id": "trace-abc.123"},
    )
    assert given.headers["x-request-id"] == "trace-abc.123"
    made = httpx.get(f"{prod.base_url}/health", headers={"X-Request-Id": "bad id\twith spaces"}, timeout=30)
    assert made.headers["x-request-id"].startswith("req-") and len(made.headers["x-request-id"]) == 36
    deadline, access = time.monotonic() + 10, []
    while not access and time.monotonic() < deadline:  # written as the response ends
        time.sleep(0.2)
        records = [json.loads(line) for line in prod.log_path.read_text().splitlines() if line.startswith("{")]
        access = [r for r in records if r.get("request_id") == "trace-abc.123" and r["logger"] == "structserve.access"]
    assert access and access[0]["status"] == 200 and access[0]["path"] == "/v1/chat/completions"


def test_serving_metrics(prod):
    client = openai.OpenAI(base_url=f"{prod.base_url}/v1", api_key=KEYS[0])
    stream = client.chat.completions.create(**chat(prod, max_tokens=5, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    text = _metrics(prod)
    for name in (
        'structserve_requests_total{route="/v1/chat/completions",status="200"}',
        "structserve_request_seconds_bucket",
        "structserve_time_to_first_token_seconds_count",
        'structserve_tokens_total{kind="prompt"}',
        'structserve_tokens_total{kind="completion"}',
        'structserve_tokens_total{kind="reasoning"}',
        'structserve_tokens_total{kind="cached"}',
        "structserve_requests_running",
        "structserve_requests_queued",
        "structserve_kv_used_tokens",
        "structserve_grammar_cache_total",
    ):
        assert name in text, name
    ttft = float(text.split("structserve_time_to_first_token_seconds_count ")[1].split()[0])
    assert ttft >= 1


def test_sigterm_drains_in_flight_and_queued_requests_then_exits_0(prod):
    """Runs last: the server is gone afterwards. Two streams run (limits.max_running 2) and a
    third request waits in the service's queue when SIGTERM arrives: all three are served;
    a new request gets 503 at once."""
    results, generating, max_tokens = [], threading.Barrier(3), 800

    def one() -> None:
        client = openai.OpenAI(base_url=f"{prod.base_url}/v1", api_key=KEYS[0], max_retries=0, timeout=120)
        stream = client.chat.completions.create(
            **chat(prod, max_tokens=max_tokens, stream=True), stream_options={"include_usage": True}
        )
        chunks = [next(stream), next(stream)]  # the role chunk, then generated text
        generating.wait()
        chunks += list(stream)
        results.append((chunks[-2].choices[0].finish_reason, chunks[-1].usage.completion_tokens, time.monotonic()))

    queued: list[httpx.Response] = []
    waiter = threading.Thread(
        target=lambda: queued.append(
            httpx.post(f"{prod.base_url}/v1/chat/completions", json=chat(prod, 20), headers=auth(), timeout=120)
        )
    )
    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    generating.wait(timeout=60)
    waiter.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "structserve_requests_queued 1.0" not in _metrics(prod):
        time.sleep(0.05)
    prod.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    time.sleep(0.3)
    ready = httpx.get(f"{prod.base_url}/ready", timeout=10)
    assert_envelope(ready, 503, "not_ready")
    refused = httpx.post(f"{prod.base_url}/v1/chat/completions", json=chat(prod), headers=auth(), timeout=10)
    assert_envelope(refused, 503, "not_ready")
    assert refused.elapsed.total_seconds() < 1.0  # refused at once, not queued behind the in-flight ones
    for t in [*threads, waiter]:
        t.join(timeout=120)
    assert len(results) == 2, "an in-flight stream was cut"
    for finish, tokens, ended in results:
        assert finish in ("length", "stop") and (tokens == max_tokens or finish == "stop")
    assert max(ended for *_, ended in results) > sent + 0.3  # still generating when the drain began
    assert queued and queued[0].status_code == 200, queued and queued[0].text  # queued before SIGTERM: served
    assert queued[0].json()["usage"]["completion_tokens"] > 0
    assert prod.proc.wait(timeout=60) == 0


def _metrics(server) -> str:
    return httpx.get(f"{server.base_url}/metrics", timeout=30).text

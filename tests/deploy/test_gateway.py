"""Two structserve replicas behind SGLang's model gateway (smg, cache-aware policy), processes on
loopback: replica A runs ``engine.dp_size: 2`` with the plugin's combined prefix cache, budget
admission and C8 KV (both schedulers report), replica B the defaults. Through the gateway with the
official openai client: chat, stream, tools, json_schema, and the anthropic client on /v1/messages;
same-prefix requests stick to one replica (each replica's /metrics) and hit its prefix cache; both
replicas keep stored responses in one real redis-server, so a chain of previous_response_id
follow-ups succeeds wherever each lands, and Redis going away is a 503 for stored responses only; a replica drained with SIGTERM finishes
its in-flight request and the gateway sends the rest to the other."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import openai
import pytest

from tests.api.test_kv_c8_aborts import scrape
from tests.fronts import Gateway
from tests.redis_server import RedisServer
from tests.server import ServerProcess

CHAT = ("structserve_requests_total", (("route", "/v1/chat/completions"), ("status", "200")))
RESPONSES = ("structserve_requests_total", (("route", "/v1/responses"), ("status", "200")))
GENERATED = ("structserve_tokens_total", (("kind", "completion"),))
pytestmark = pytest.mark.timeout(900)
BASE_ENV = {"STRUCTSERVE_DTYPE": "float32", "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false"}
DP2_ENV = {
    "STRUCTSERVE_ENGINE__DP_SIZE": "2",
    "STRUCTSERVE_PREFIX_CACHE__BACKEND": "combined",
    "STRUCTSERVE_SCHEDULING__ADMISSION": "budget",
    "STRUCTSERVE_KV_CACHE": "c8_dynamic",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The fleet's shared response store: its own redis-server (a test takes it down)."""
    server = RedisServer(
        tmp_path_factory.mktemp("fleet-redis"), "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fleet(assets, tmp_path_factory, store):
    shared = {**BASE_ENV, "STRUCTSERVE_RESPONSES__STORE": "redis", "STRUCTSERVE_RESPONSES__REDIS_URL": store.url}
    replicas = {
        "a": ServerProcess(assets.qwen3_tiny, "gw-a-dp2", env={**shared, **DP2_ENV}),
        "b": ServerProcess(assets.qwen3_tiny, "gw-b", env=shared),
    }
    gateway = None
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda r: r.start(), replicas.values()))
        urls = [r.base_url for r in replicas.values()]
        gateway = Gateway(urls, tmp_path_factory.mktemp("gateway") / "smg.log")
        yield replicas, gateway
    finally:
        if gateway is not None:
            gateway.stop()
        for replica in replicas.values():
            replica.stop()


def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=300)


def served(replicas: dict, counter: tuple = CHAT) -> dict[str, float]:
    return {name: scrape(r).get(counter, 0.0) for name, r in replicas.items() if r.proc.poll() is None}


def ask(gateway: Gateway, model: str, system: str, question: str, max_tokens: int = 4):
    return client(gateway).chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=max_tokens,
        temperature=0,
    )


def tenant_prompt(tenant: str) -> str:
    return f"You are the assistant of tenant {tenant}. " + " ".join(
        f"Rule {i}: answer {tenant} style." for i in range(60)
    )


def test_dp2_replica_runs_the_plugin_in_both_schedulers(fleet) -> None:
    replicas, _ = fleet
    metrics = scrape(replicas["a"])
    loaded = {
        dict(k[1])["dp_rank"]: dict(k[1])["scheduler_pid"] for k in metrics if k[0] == "structserve_runtime_ext_loaded"
    }
    assert sorted(loaded) == ["0", "1"] and len(set(loaded.values())) == 2, loaded
    assert metrics[("structserve_kv_capacity_tokens", ())] == 2 * 8192  # one pool per scheduler
    assert metrics[("structserve_admission_policy", (("policy", "budget"),))] == 1
    assert metrics[("structserve_kv_cache_method", (("method", "c8_dynamic"),))] == 1


def test_openai_client_through_the_gateway(fleet) -> None:
    replicas, gateway = fleet
    model, api = replicas["a"].model_name, client(gateway)
    reply = api.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=5)
    assert reply.choices[0].finish_reason in ("length", "stop") and reply.usage.completion_tokens >= 1
    chunks = list(
        api.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True
        )
    )
    assert chunks and chunks[-1].choices[0].finish_reason in ("length", "stop")
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
            },
        },
    }
    call = api.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[tool],
        tool_choice="required",
        max_tokens=60,
        temperature=0,
    )
    assert "city" in json.loads(call.choices[0].message.tool_calls[0].function.arguments)
    schema = {
        "type": "object",
        "properties": {"n": {"type": "string", "maxLength": 8}},  # bounded: the answer fits max_tokens
        "required": ["n"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}}
    out = api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "A word"}], response_format=fmt, max_tokens=40, temperature=0
    )
    assert out.choices[0].finish_reason == "stop", out
    assert isinstance(json.loads(out.choices[0].message.content)["n"], str)


def test_anthropic_client_through_the_gateway(fleet) -> None:
    """/v1/messages and /v1/messages/count_tokens pass through smg to a structserve worker: the
    anthropic SDK's message, its stream accumulated into a message of the same prompt, and the count
    (the replicas differ in KV format, so greedy text is compared in tests/api/test_messages.py)."""
    replicas, gateway = fleet
    api = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0, timeout=300)
    body = {
        "model": replicas["b"].model_name,
        "max_tokens": 8,
        "extra_body": {"temperature": 0.0},  # the SDK (2.x) no longer declares it; the API takes it
        "messages": [{"role": "user", "content": "Name a colour."}],
    }
    message = api.messages.create(**body)
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason in ("end_turn", "max_tokens") and 1 <= message.usage.output_tokens <= 8
    with api.messages.stream(**body) as stream:
        streamed = stream.get_final_message()
    assert streamed.usage.input_tokens == message.usage.input_tokens and streamed.content[0].type == "text"
    assert streamed.stop_reason in ("end_turn", "max_tokens") and 1 <= streamed.usage.output_tokens <= 8
    count = api.messages.count_tokens(model=body["model"], messages=body["messages"])
    assert count.input_tokens == message.usage.input_tokens


def test_same_prefix_sticks_to_one_replica_and_hits_its_cache(fleet) -> None:
    replicas, gateway = fleet
    for tenant in ("north", "south", "east"):
        before = served(replicas)
        replies = [ask(gateway, replicas["a"].model_name, tenant_prompt(tenant), f"Question {i}?") for i in range(4)]
        after = served(replicas)
        grew = {name: after[name] - before[name] for name in after}
        assert sorted(grew.values()) == [0, 4], (tenant, grew)  # all four on one replica
        # by the third request both of A's schedulers hold the prefix: SGLang's DP controller
        # spreads a replica's requests round-robin over its ranks, each with its own cache
        cached = [r.usage.prompt_tokens_details.cached_tokens for r in replies[2:]]
        assert min(cached) >= 0.8 * replies[0].usage.prompt_tokens, cached


# distinct openings: the cache-aware policy sees no shared prefix, so follow-ups do not all stick
FOLLOW_UPS = "Apples? Bridges? Clouds? Dunes? Eagles? Forests? Glaciers? Harbors? Islands? Jungles?".split()


def test_follow_ups_chain_across_both_replicas_through_the_shared_store(fleet) -> None:
    """The gateway stores every Responses request (it adds store: true); with the store in Redis a
    follow-up works on either replica. 10 chained follow-ups, all served, on both replicas."""
    replicas, gateway = fleet
    api, model = client(gateway), replicas["a"].model_name
    previous = api.responses.create(model=model, input="Tell me about places.", max_output_tokens=4, temperature=0)
    before = served(replicas, RESPONSES)
    for text in FOLLOW_UPS:
        reply = api.responses.create(
            model=model, input=text, previous_response_id=previous.id, max_output_tokens=4, temperature=0
        )
        assert reply.status in ("completed", "incomplete") and reply.previous_response_id == previous.id
        assert reply.usage.input_tokens > previous.usage.input_tokens  # the whole chain came along
        previous = reply
    after = served(replicas, RESPONSES)
    landed = {name: after[name] - before[name] for name in after}
    assert sum(landed.values()) == len(FOLLOW_UPS) and min(landed.values()) >= 1, landed  # both replicas


def test_store_down_is_a_503_for_stored_responses_only(fleet, store) -> None:
    """Redis gone: a stored Responses request is a 503 store_unavailable (logged) before any
    generation, a store: false one and chat are served. Runs after the chain test: it leaves Redis down."""
    replicas, gateway = fleet
    api, model = client(gateway), replicas["a"].model_name
    store.stop()
    generated = served(replicas, GENERATED)
    with pytest.raises(openai.APIStatusError) as refused:
        api.responses.create(model=model, input="Hi", max_output_tokens=2)  # the gateway adds store: true
    assert refused.value.status_code == 503 and refused.value.body["code"] == "store_unavailable", refused.value
    assert served(replicas, GENERATED) == generated  # refused before any generation
    direct = openai.OpenAI(base_url=f"{replicas['b'].base_url}/v1", api_key="unused", max_retries=0, timeout=300)
    assert direct.responses.create(model=model, input="Hi", max_output_tokens=2, store=False).status in (
        "completed",
        "incomplete",
    )
    assert ask(gateway, model, "Be brief.", "Hi?").choices[0].finish_reason in ("length", "stop")
    assert any("response store (Redis) unavailable" in r.log_tail(400) for r in replicas.values())


def test_drained_replica_finishes_in_flight_and_the_rest_are_served(fleet) -> None:
    replicas, gateway = fleet
    model, system = replicas["a"].model_name, tenant_prompt("drain")
    before = served(replicas)
    ask(gateway, model, system, "Warm up?")
    home = next(name for name, n in served(replicas).items() if n > before[name])
    results: list = []
    in_flight = threading.Thread(
        target=lambda: results.append(ask(gateway, model, system, "Long one?", max_tokens=120))
    )
    in_flight.start()
    time.sleep(1.5)  # the long request is running on its home replica
    assert replicas[home].stop() == 0  # SIGTERM: drains, then exits 0
    in_flight.join(timeout=300)
    assert results and results[0].usage.completion_tokens == 120  # finished, not cut
    after = [ask(gateway, model, system, f"After {i}?") for i in range(4)]  # no client error
    assert all(r.choices[0].finish_reason == "length" for r in after)

"""response_format json_object / json_schema through the real engine and HTTP."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

USER = [{"role": "user", "content": "Fill in the record with plausible example data."}]


def _post(server, **body):
    payload = {"model": server.model_name, "messages": USER, "max_tokens": 16, **body}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=payload, timeout=300)


def _fmt(schema, name="out"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


BOUNDED = [
    {
        "type": "object",
        "properties": {"label": {"enum": ["spam", "ham", "unsure"]}},
        "required": ["label"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
    {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "code": {"enum": [200, 404]}},
        "required": ["ok", "code"],
        "additionalProperties": False,
    },
]


@pytest.mark.parametrize("schema", BOUNDED)
def test_random_model_is_forced_into_the_schema(qwen_server, schema):
    for seed in range(3):
        resp = _post(qwen_server, response_format=_fmt(schema), max_tokens=64, temperature=1.0, seed=seed)
        choice = resp.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        Draft202012Validator(schema).validate(json.loads(choice["message"]["content"]))
        assert choice["schema_validation"]["valid"] is True


def test_json_object_gives_an_object(qwen_server):
    """The random model rarely closes its object within 64 tokens (greedy never does: measured), so
    several seeds: each finished output is an object, each cut one starts one and says it was cut."""
    finished = 0
    for seed in range(8):
        resp = _post(qwen_server, response_format={"type": "json_object"}, max_tokens=64, temperature=1.0, seed=seed)
        choice = resp.json()["choices"][0]
        assert choice["message"]["content"].startswith("{"), choice
        if choice["finish_reason"] == "stop":
            finished += 1
            assert isinstance(json.loads(choice["message"]["content"]), dict)
        else:
            assert choice["finish_reason"] == "length" and "truncated" in choice["schema_validation"]["error"]
    assert finished >= 1, "no seed finished its object: the dict check never ran"  # measured: seed 7


def test_stream_equals_non_stream_with_schema(qwen_server):
    client = openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="x", max_retries=0)
    kw = dict(
        model=qwen_server.model_name,
        messages=USER,
        max_tokens=40,
        temperature=1.0,
        seed=5,
        response_format=_fmt(BOUNDED[2]),
    )
    full = client.chat.completions.create(**kw)
    text, last = "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            last = c if c.finish_reason else last
    assert text == full.choices[0].message.content
    assert last.finish_reason == "stop" and last.model_extra["schema_validation"]["valid"] is True


def _deep(n):
    schema = {"type": "object"}
    for _ in range(n):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BAD = [
    ("objekt", {"type": "objekt"}, "invalid_schema"),
    (
        "unsupported",
        {"type": "object", "properties": {"a": {"type": "string", "nullable": True}}},
        "unsupported_schema_keyword",
    ),
    ("remote-ref", {"$ref": "https://example.com/schema.json"}, "remote_ref"),
    ("deep", _deep(200), "schema_too_complex"),
    ("huge-enum", {"enum": list(range(100_000))}, "schema_too_complex"),
    ("bad-regex", {"type": "string", "pattern": "([a-z"}, None),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_schemas_are_400s_and_the_server_keeps_serving(qwen_server, case):
    _, schema, code = case
    resp = _post(qwen_server, response_format=_fmt(schema))
    assert resp.status_code == 400, resp.text[:300]
    err = resp.json()["error"]
    assert err["param"] == "response_format.json_schema.schema" and err["message"]
    if code:
        assert err["code"] == code
    assert _post(qwen_server).status_code == 200


def test_10k_deep_nesting_is_a_400(qwen_server):
    n = 10_000  # too deep for any JSON encoder too: build the body by hand
    schema = '{"type":"object","properties":{"a":' * n + '{"type":"object"}' + "}}" * n
    body = (
        f'{{"model":"{qwen_server.model_name}","messages":[{{"role":"user","content":"hi"}}],'
        f'"response_format":{{"type":"json_schema","json_schema":{{"name":"x","schema":{schema}}}}}}}'
    )
    resp = httpx.post(
        f"{qwen_server.base_url}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] in ("invalid_json", "schema_too_complex")
    assert "nested too deeply" in resp.json()["error"]["message"] or resp.json()["error"]["param"]
    assert _post(qwen_server).status_code == 200


def test_a_schema_no_grammar_enforces_is_validated_and_resampled_and_loosening_stays_opt_in(qwen_server):
    """``uniqueItems``: neither library enforces it. Non-streamed (``grammar.unenforceable:
    resample``): served under the grammar without it, and only outputs that validate come back
    (else a 422), with the generations counted; streamed: a 400 that says how; the client's own
    ``allow_schema_loosening`` keeps its meaning (the last output is returned, flagged)."""
    schema = {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 3, "uniqueItems": True}
    served = 0
    for seed in range(3):
        resp = _post(qwen_server, response_format=_fmt(schema), max_tokens=32, temperature=1.0, seed=seed)
        if resp.status_code == 422:
            assert resp.json()["error"]["code"] == "schema_validation_failed", resp.text
            continue
        assert resp.status_code == 200, resp.text
        choice = resp.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        items = json.loads(choice["message"]["content"])
        assert len(items) == len(set(items)) and choice["schema_validation"]["valid"] is True
        assert 1 <= resp.json()["usage"]["schema_attempts"] <= 3
        served += 1
    assert served >= 1
    streamed = _post(qwen_server, response_format=_fmt(schema), stream=True)
    assert streamed.status_code == 400 and '"stream": false' in streamed.json()["error"]["message"]
    resp = _post(qwen_server, response_format=_fmt(schema), allow_schema_loosening=True, max_tokens=32)
    assert resp.status_code == 200
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice  # the grammar bounds the array to 3 items
    items = json.loads(choice["message"]["content"])  # still validated against the full schema
    assert choice["schema_validation"]["valid"] is (len(items) == len(set(items)))


def test_missing_schema_and_misplaced_json_schema(qwen_server):
    r1 = _post(qwen_server, response_format={"type": "json_schema"})
    assert r1.status_code == 400 and r1.json()["error"]["param"] == "response_format.json_schema.schema"
    r2 = _post(qwen_server, response_format={"type": "text", "json_schema": {"name": "x", "schema": {}}})
    assert r2.status_code == 400 and r2.json()["error"]["param"] == "response_format.json_schema"


LOOP_DEFS = {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}
ENGINE_TEXT = ("Key string", "accept_token", "Tokens not accepted", "Accepted tokens", "xgrammar", ".cc:")


def test_a_ref_loop_is_a_400_before_the_engine(qwen_server):
    """a -> b -> a through $defs consumes no input: xgrammar compiles it, then allows no
    token where the value starts. It used to reach the engine and come back as a 500
    quoting SGLang ("Grammar accept_token failed ... Key string: <schema>"); a tool's
    parameters with the loop came back as 200 with empty content."""
    client = openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="x", max_retries=0)
    kw = dict(model=qwen_server.model_name, messages=USER, max_tokens=16)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                response_format=_fmt({"$defs": LOOP_DEFS, "$ref": "#/$defs/a"}), stream=stream, **kw
            )
        err = info.value.body
        assert (err["param"], err["code"]) == ("response_format.json_schema.schema", "unsatisfiable_schema")
        assert "#/$defs/a -($ref)-> #/$defs/b -($ref)-> #/$defs/a" in err["message"]
        assert not [t for t in ENGINE_TEXT if t in err["message"]], err["message"]
    looped = {"type": "object", "properties": {"p": {"$ref": "#/$defs/a"}}, "required": ["p"], "$defs": LOOP_DEFS}
    tools = [
        {"type": "function", "function": {"name": n, "parameters": p}}
        for n, p in (("fine", {"type": "object"}), ("looped", looped))
    ]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(tools=tools, tool_choice="required", **kw)
    err = info.value.body
    assert (err["param"], err["code"]) == ("tools.1.function.parameters", "unsatisfiable_schema")
    assert client.chat.completions.create(**kw).choices[0].finish_reason in ("stop", "length")


def test_unknown_keywords_are_annotations_named_on_the_choice_and_counted(qwen_server):
    """A schema with keywords JSON Schema does not define (``tlo``, ``self``) is served, not
    refused; the choice names them and /metrics counts them; the grammar still holds."""
    schema = {
        "type": "object",
        "tlo": "flag",
        "properties": {"ok": {"type": "boolean", "self": "/flags/ok"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    resp = _post(qwen_server, response_format=_fmt(schema), max_tokens=64, temperature=1.0, seed=1)
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    Draft202012Validator(schema).validate(json.loads(choice["message"]["content"]))
    check = choice["schema_validation"]
    assert check["valid"] is True and check["ignored_keywords"] == ["tlo at /", "self at /properties/ok"]
    metrics = httpx.get(f"{qwen_server.base_url}/metrics", timeout=30).text
    assert 'structserve_schema_ignored_keywords_total{keyword="tlo"}' in metrics


def test_a_schema_xgrammar_cannot_enforce_is_served_by_llguidances_own_compiler(qwen_server):
    """``multipleOf`` (SGLang refuses it before xgrammar) and ``type`` beside ``anyOf`` (xgrammar
    ignores it there): the whole schema goes to llguidance's JSON Schema compiler. The random
    model writes what the grammar allows, so every answer holding to the schema shows it is
    enforced; ``uniqueItems``, which llguidance does not implement, is a 400 that says so when
    streamed (non-streamed it is validated and resampled: the test above)."""
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 99}},
        "required": ["n"],
        "additionalProperties": False,
        "anyOf": [{"required": ["n"]}, {"required": ["m"]}],
    }
    routed = _native_routes(qwen_server)
    for seed in range(4):
        resp = _post(qwen_server, response_format=_fmt(schema), max_tokens=48, temperature=1.0, seed=seed)
        assert resp.status_code == 200, resp.text
        choice = resp.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        Draft202012Validator(schema).validate(json.loads(choice["message"]["content"]))
        assert choice["schema_validation"]["valid"] is True
    assert _native_routes(qwen_server) == routed + 4
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    refused = _post(qwen_server, response_format=_fmt(unique), stream=True)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "unsupported_schema_keyword" and error["param"] == "response_format.json_schema.schema"
    assert "llguidance's JSON Schema compiler refuses it too" in error["message"], error["message"]


def _native_routes(server) -> float:
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    found = re.search(
        r'^structserve_grammar_cache_total\{kind="llguidance_json",result="routed"\} (\S+)$', metrics, re.M
    )
    return float(found.group(1)) if found else 0.0

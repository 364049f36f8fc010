"""/tokenize and /detokenize over real HTTP on the tiny Qwen3 server: a conversation's tokens are
exactly the prompt a chat completion of it reports in ``usage.prompt_tokens`` (tools included),
text survives the round trip, and bad input is a 4xx naming the field."""

from __future__ import annotations

import httpx
import openai

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
]


def post(server, path, body) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=120)


def test_messages_count_is_the_chat_prompt(qwen_server):
    chat = openai.OpenAI(base_url=f"{qwen_server.base_url}/v1", api_key="x", max_retries=0, timeout=300)
    for tools in ([WEATHER], None):
        extra = {"tools": tools} if tools else {}
        r = post(qwen_server, "/tokenize", {"model": qwen_server.model_name, "messages": CONVERSATION, **extra})
        assert r.status_code == 200, r.text
        body = r.json()
        done = chat.chat.completions.create(
            model=qwen_server.model_name, messages=CONVERSATION, max_tokens=1, temperature=0, **extra
        )
        assert body["count"] == len(body["tokens"]) == done.usage.prompt_tokens
        assert body["max_model_len"] > body["count"]
    v1 = post(qwen_server, "/v1/tokenize", {"messages": CONVERSATION, "tools": [WEATHER]})
    assert v1.json()["tokens"] != body["tokens"]  # the tools are in the rendered prompt


def test_detokenize_of_tokenize_is_the_text(qwen_server):
    text = 'Café — naïve 東京 🙂 <|im_end|> done\n  {"a": [1, 2]}'
    r = post(qwen_server, "/tokenize", {"prompt": text, "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["token_strs"]) == body["count"] == len(body["tokens"]) > 0
    back = post(qwen_server, "/detokenize", {"tokens": body["tokens"]}).json()
    assert back["prompt"] == back["text"] == text
    batch = post(qwen_server, "/v1/tokenize", {"prompt": [text, "hi"]}).json()
    assert batch["tokens"][0] == body["tokens"] and batch["count"][1] == len(batch["tokens"][1])
    assert post(qwen_server, "/v1/detokenize", {"tokens": batch["tokens"]}).json()["text"] == [text, "hi"]


def test_bad_input_is_a_4xx_naming_the_field(qwen_server):
    cases = [
        ("/detokenize", {"tokens": [1, 10**9]}, "tokens.1"),
        ("/detokenize", {"tokens": [-3]}, "tokens.0"),
        ("/detokenize", {"tokens": [[1], [2**40]]}, "tokens.1.0"),
        ("/tokenize", {"prompt": "hi", "temperature": 0.5}, "temperature"),
        ("/tokenize", {"prompt": "hi", "messages": CONVERSATION}, "prompt"),
        ("/tokenize", {"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ("/tokenize", {"prompt": "hi", "model": "another"}, "model"),
        ("/v1/tokenize", {"messages": CONVERSATION, "add_generation_prompt": False}, "add_generation_prompt"),
    ]
    for path, body, param in cases:
        r = post(qwen_server, path, body)
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
        assert param in (r.json()["error"]["param"] or "") or param in r.json()["error"]["message"], (body, r.text)

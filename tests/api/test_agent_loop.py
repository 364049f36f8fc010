"""The usual agent loop with the official openai client: the assistant message the server
returned goes back into ``messages`` as it is (the object, or its ``.model_dump()``) and
the next turn is asked for. Every field the server put on it must be accepted, and
reasoning that comes back must reach the chat template."""

from __future__ import annotations

import json

import openai
import pytest
from transformers import AutoTokenizer

USER = {"role": "user", "content": "Pick a colour for me."}
PICK = {
    "type": "function",
    "function": {
        "name": "pick",
        "parameters": {
            "type": "object",
            "properties": {"color": {"enum": ["red", "blue"]}},
            "required": ["color"],
            "additionalProperties": False,
        },
    },
}
THINK = {"enable_thinking": True, "max_reasoning_tokens": 8}


def client(server):
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)


def chat(server, messages, **kw):
    kw = {"model": server.model_name, "messages": messages, "max_tokens": 24, "temperature": 1.0, "seed": 3, **kw}
    return client(server).chat.completions.create(**kw)


def returned(message, form):
    """The message as a client keeps it: the response object itself (the client sends the
    fields the server set) or its full ``model_dump()`` (refusal, annotations, audio,
    function_call as null, plus the server's reasoning fields)."""
    return message if form == "object" else message.model_dump()


@pytest.mark.parametrize("form", ["object", "model_dump"])
@pytest.mark.parametrize("name", ["qwen_server", "smol_server"])
def test_plain_answer_comes_back(request, name, form):
    server = request.getfixturevalue(name)
    first = chat(server, [USER])
    msg = first.choices[0].message
    assert msg.model_extra["reasoning_content"] is None and msg.model_extra["reasoning"] is None
    second = chat(server, [USER, returned(msg, form), {"role": "user", "content": "Why?"}])
    assert second.choices[0].message.content is not None
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


def _tool_turns(server, form, **kw):
    """Turn 1 calls the tool; turn 2 sends the call back with its result."""
    tools = {"tools": [PICK], "max_tokens": 64}
    first = chat(server, [USER], tool_choice="required", parallel_tool_calls=False, **tools, **kw)
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls", first
    call = msg.tool_calls[0]
    result = {"role": "tool", "tool_call_id": call.id, "content": "done"}
    second = chat(server, [USER, returned(msg, form), result], **tools, **kw)
    return msg, second


@pytest.mark.parametrize("form", ["object", "model_dump"])
def test_tool_call_answer_comes_back(qwen_server, form):
    msg, second = _tool_turns(qwen_server, form)
    assert msg.content is None and msg.model_extra["reasoning_content"] is None
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("form", ["object", "model_dump"])
def test_reasoning_answer_comes_back_and_reaches_the_template(qwen_server, form):
    msg, second = _tool_turns(qwen_server, form, extra_body=THINK)
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning and reasoning == msg.model_extra["reasoning"]
    # Qwen3's template renders the reasoning of an assistant turn after the last user query
    # (a tool loop): the prompt of turn 2 is the template's rendering WITH it, not without
    call = msg.tool_calls[0]
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.function.name, "arguments": json.loads(call.function.arguments)},
        }
    ]
    result = {"role": "tool", "tool_call_id": call.id, "content": "done"}
    tok = AutoTokenizer.from_pretrained(str(qwen_server.model_dir))

    def prompt_len(assistant):
        text = tok.apply_chat_template(
            [USER, assistant, result], tools=[PICK], tokenize=False, add_generation_prompt=True
        )
        return len(tok.encode(text + "<think>\n", add_special_tokens=False))

    plain = {"role": "assistant", "content": "", "tool_calls": calls}
    assert second.usage.prompt_tokens == prompt_len({**plain, "reasoning_content": reasoning})
    assert second.usage.prompt_tokens > prompt_len(plain)


def test_plain_reasoning_answer_comes_back(qwen_server):
    first = chat(qwen_server, [USER], extra_body=THINK)
    msg = first.choices[0].message
    assert msg.model_extra["reasoning_content"] and msg.content is not None
    second = chat(qwen_server, [USER, msg.model_dump(), {"role": "user", "content": "Why?"}], extra_body=THINK)
    assert second.usage.completion_tokens_details.reasoning_tokens == 8

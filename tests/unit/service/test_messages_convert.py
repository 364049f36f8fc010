"""The Messages converter is pure: Anthropic requests -> the chat request ChatPipeline runs,
every refusal an InvalidRequestError naming the Anthropic field; chat error paths map back;
the builder turns a ChatCompletion into a Message and chunks into Anthropic's events."""

from __future__ import annotations

import pytest

from service.api.errors import anthropic_body, is_anthropic
from service.errors import ConversionError, InvalidRequestError
from service.fronts.messages import MessageEventStream, from_completion, to_chat_request
from service.protocol.anthropic import MessagesRequest
from service.protocol.openai import ChatCompletion, ChatCompletionChunk

TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}


def req(**fields) -> MessagesRequest:
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]} | fields
    return MessagesRequest.model_validate(body)


def agent_history(result: dict) -> list[dict]:
    return [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": ""}, CALL]},
        {"role": "user", "content": [result, {"type": "text", "text": "and now?"}]},
    ]


def test_a_full_request_maps_field_by_field():
    chat, _ = to_chat_request(
        req(
            system=[{"type": "text", "text": "be brief"}],
            stop_sequences=["END"],
            temperature=0.5,
            top_p=0.9,
            top_k=5,
            metadata={"user_id": "u1"},
            tools=[TOOL],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 16},
            stream=True,
        )
    )
    assert chat.messages[0].role == "system" and chat.messages[0].content == "be brief"
    assert (chat.stop, chat.temperature, chat.top_p, chat.top_k, chat.user) == (["END"], 0.5, 0.9, 5, "u1")
    assert chat.max_completion_tokens == 64 and chat.tool_choice == "required" and chat.parallel_tool_calls is False
    assert chat.enable_thinking is True and chat.max_reasoning_tokens == 16
    assert chat.tools[0].function.parameters == TOOL["input_schema"] and chat.stream


@pytest.mark.parametrize(
    ("choice", "chat_choice"),
    [({"type": "auto"}, "auto"), ({"type": "none"}, "none"), ({"type": "tool", "name": "get_weather"}, "named")],
)
def test_tool_choice(choice, chat_choice):
    chat, _ = to_chat_request(req(tools=[TOOL], tool_choice=choice))
    got = chat.tool_choice if isinstance(chat.tool_choice, str) else "named"
    assert got == chat_choice


def test_no_thinking_field_turns_thinking_off():
    assert to_chat_request(req())[0].enable_thinking is False
    assert to_chat_request(req(thinking={"type": "disabled"}))[0].enable_thinking is False


def test_history_becomes_chat_turns():
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]}
    chat, _ = to_chat_request(req(messages=agent_history(result | {"is_error": True})))
    roles = [m.role for m in chat.messages]
    assert roles == ["user", "assistant", "tool", "user"]
    assistant, tool = chat.messages[1], chat.messages[2]
    assert assistant.reasoning_content == "hmm" and assistant.tool_calls[0].function.arguments == '{"city": "Paris"}'
    assert tool.tool_call_id == "toolu_1" and tool.content == "Error: sunny"


BAD = [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "assistant", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}, "messages.1.role"),
    (
        {"messages": agent_history({"type": "tool_result", "tool_use_id": "toolu_other", "content": "x"})},
        "messages.2.content.0.tool_use_id",
    ),
    ({"messages": [{"role": "user", "content": [CALL]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}]}, "messages.0.content.0.type"),
    ({"thinking": {"type": "enabled", "budget_tokens": 64}}, "thinking.budget_tokens"),
]


@pytest.mark.parametrize(("fields", "param"), BAD)
def test_bad_requests_name_the_field(fields, param):
    with pytest.raises(InvalidRequestError) as info:
        to_chat_request(req(**fields))
    assert info.value.param == param


def test_chat_paths_map_back():
    _, params = to_chat_request(req(messages=agent_history({"type": "tool_result", "tool_use_id": "toolu_1"})))
    assert params.to_front("tools.0.function.parameters.properties") == "tools.0.input_schema.properties"
    assert params.to_front("messages.1.tool_calls.0.function.arguments") == "messages.1.content.1.input"
    assert params.to_front("messages.2.tool_call_id") == "messages.2.content.0.tool_use_id"
    assert params.to_front("max_completion_tokens") == "max_tokens"
    assert params.to_front("max_reasoning_tokens") == "thinking.budget_tokens"
    assert params.to_front("stop") == "stop_sequences"


def test_the_anthropic_envelope():
    assert is_anthropic("/v1/messages") and is_anthropic("/v1/messages/count_tokens")
    assert not is_anthropic("/v1/messagesx") and not is_anthropic("/v1/chat/completions")
    body = {"error": {"message": "too big", "type": "x", "param": "max_tokens", "code": None}}
    assert anthropic_body(400, body) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: too big"},
    }
    assert anthropic_body(401, body)["error"]["type"] == "authentication_error"
    assert anthropic_body(503, body)["error"]["type"] == "overloaded_error"
    assert anthropic_body(500, body)["error"]["type"] == "api_error"


COMPLETION = {
    "id": "c",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "content": "ok",
                "reasoning_content": "think",
                "tool_calls": [{"id": "call_ab", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 3},
    },
}


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> ChatCompletionChunk:
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return ChatCompletionChunk.model_validate(
        {"id": "c", "created": 0, "model": "m", "choices": choices, "usage": usage}
    )


def test_stream_events_accumulate_to_the_message():
    import anthropic
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    message = from_completion(ChatCompletion.model_validate(COMPLETION), "msg_1")
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].id == "toolu_ab" and message.stop_reason == "tool_use"
    assert message.usage.cache_read_input_tokens == 3
    stream = MessageEventStream("msg_1", "m")
    call = {"index": 0, "id": "call_ab", "type": "function", "function": {"name": "f", "arguments": ""}}
    events = stream.start()
    for c in (
        chunk({"reasoning_content": "thi"}),
        chunk({"reasoning_content": "nk"}),
        chunk({"content": "ok"}),
        chunk({"tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}, "tool_calls"),
        chunk({}, usage=COMPLETION["usage"]),
    ):
        events += stream.feed(c)
    events += stream.finish()
    adapter, snapshot, bufs = TypeAdapter(RawMessageStreamEvent), None, {}
    for event in events:
        if event["type"] != "ping":
            snapshot = accumulate_event(event=adapter.validate_python(event), current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None and snapshot.model_dump(exclude_none=True) == anthropic.types.Message.model_validate(
        message.model_dump()
    ).model_dump(exclude_none=True)


def test_a_stop_string_is_the_stop_sequence():
    done = COMPLETION | {
        "choices": [{"index": 0, "finish_reason": "stop", "stop_reason": "END", "message": {"content": "ok"}}]
    }
    message = from_completion(ChatCompletion.model_validate(done), "msg_1")
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")
    eos = done | {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "ok"}}]}
    assert from_completion(ChatCompletion.model_validate(eos), "msg_1").stop_reason == "end_turn"


def test_a_fragment_for_a_closed_call_or_a_custom_call_is_a_conversion_error():
    stream = MessageEventStream("msg_1", "m")
    start = [
        {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": "f", "arguments": ""}} for i in (0, 1)
    ]
    stream.feed(chunk({"tool_calls": start}))
    with pytest.raises(ConversionError, match="tool call 0"):
        stream.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}))
    custom = {"id": "call_c", "type": "custom", "custom": {"name": "sh", "input": "ls"}}
    done = COMPLETION | {
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [custom]}}]
    }
    with pytest.raises(ConversionError, match="sh"):
        from_completion(ChatCompletion.model_validate(done), "msg_1")


def test_a_call_id_the_format_names_itself_is_kept():
    """``call_<hex>`` ids become ``toolu_<hex>``; Kimi-K2's ``functions.NAME:N`` stays, since its
    template renders the id back into the next turn's history where the model wrote it."""
    from service.fronts.messages.build_message import tool_use_id

    assert tool_use_id("call_ab") == "toolu_ab"
    assert tool_use_id("functions.get_weather:3") == "functions.get_weather:3"

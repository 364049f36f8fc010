"""Chat -> Responses (pure: no engine): a completion and a chunk stream become the same Response,
in the order the openai SDK reads (the request side is test_responses_convert.py)."""

from __future__ import annotations

import itertools
import json

import openai.types.responses as oai
import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState

from service.errors import ConversionError
from service.fronts.responses import (
    ResponseBuilder,
    ResponseEventStream,
)
from service.pipeline.openai_objects import ChunkFactory, completion, make_usage
from service.protocol.openai import (
    DeltaCustom,
    DeltaFunction,
    DeltaToolCall,
)
from service.types.results import ChoiceEvent, FinishedChoice
from tests.unit.service.responses_cases import (
    RUN,
    TOOL_CALL_A,
    TOOL_CALL_B,
    WEATHER,
    chat_completion,
    finished,
    request,
    tokens,
)

# --- completion -> Response ---------------------------------------------------------------


def ids():
    count = itertools.count()
    return lambda prefix: f"{prefix}_{next(count)}"


def builder(req=None):
    return ResponseBuilder(req or request(), response_id="resp_1", created_at=7, new_id=ids())


def test_a_completion_becomes_reasoning_then_message_then_calls():
    r = builder().from_completion(
        chat_completion(
            "Checking.", reasoning="think", tool_calls=[TOOL_CALL_A, TOOL_CALL_B], finish_reason="tool_calls"
        )
    )
    assert r.status == "completed" and r.incomplete_details is None
    assert [(o.type, o.id) for o in r.output] == [
        ("reasoning", "rs_0"),
        ("message", "msg_1"),
        ("function_call", "fc_2"),
        ("function_call", "fc_3"),
    ]
    assert r.output[0].content[0].text == "think" and r.output[1].content[0].text == "Checking."
    assert [(o.call_id, o.name, o.arguments, o.status) for o in r.output[2:]] == [
        ("call_a", "get_weather", '{"city": "Paris"}', "completed"),
        ("call_b", "get_time", "{}", "completed"),
    ]
    usage = r.usage
    assert (usage.input_tokens, usage.input_tokens_details.cached_tokens, usage.output_tokens) == (20, 16, 9)
    assert (usage.output_tokens_details.reasoning_tokens, usage.total_tokens) == (4, 29)


def test_a_call_only_answer_has_no_message_and_an_empty_answer_has_an_empty_one():
    calls = builder().from_completion(chat_completion(None, tool_calls=[TOOL_CALL_A, RUN], finish_reason="tool_calls"))
    assert [o.type for o in calls.output] == ["function_call", "custom_tool_call"]
    assert (calls.output[1].call_id, calls.output[1].input, calls.output[1].id) == ("call_k", "ls -la", "ctc_1")
    empty = builder().from_completion(chat_completion(None))
    assert [(o.type, o.content[0].text) for o in empty.output] == [("message", "")]


def test_length_makes_the_response_and_its_last_item_incomplete():
    r = builder().from_completion(chat_completion("Hel", reasoning="r", finish_reason="length"))
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[-1].status == "incomplete"


def test_logprobs_reach_the_output_text():
    r = builder().from_completion(chat_completion("Hi!", logprobs=tokens("Hi", "!")))
    assert [(lp.token, lp.bytes, [t.token for t in lp.top_logprobs]) for lp in r.output[0].content[0].logprobs] == [
        ("Hi", [72, 105], ["Hi"]),
        ("!", [33], ["!"]),
    ]


def test_request_fields_are_echoed():
    req = request(
        instructions="sys",
        max_output_tokens=9,
        tools=[WEATHER],
        tool_choice="required",
        metadata={"a": "b"},
        store=True,
        previous_response_id="resp_0",
    )
    r = builder(req).from_completion(chat_completion("x"))
    assert (r.instructions, r.max_output_tokens, r.tool_choice, r.metadata, r.store) == (
        "sys",
        9,
        "required",
        {"a": "b"},
        True,
    )
    assert r.previous_response_id == "resp_0" and r.tools[0].name == "get_weather" and r.temperature == 1.0


# --- chunks -> events: the same response, in the SDK's order ----------------------------------


def fn_start(index, call_id, name):
    return DeltaToolCall(index=index, id=call_id, type="function", function=DeltaFunction(name=name, arguments=""))


def fn_args(index, text):
    return DeltaToolCall(index=index, function=DeltaFunction(arguments=text))


SCENARIOS = {
    "reasoning then text": (
        [
            ChoiceEvent(reasoning="Two plus "),
            ChoiceEvent(reasoning="two."),
            ChoiceEvent(content="It is", logprobs=tokens("It", " is")),
            ChoiceEvent(content=" 4.", logprobs=tokens(" 4.")),
        ],
        finished("It is 4.", reasoning="Two plus two.", logprobs=tokens("It", " is", " 4.")),
    ),
    "text then two parallel calls": (
        [
            ChoiceEvent(content="Checking both."),
            ChoiceEvent(tool_calls=(fn_start(0, "call_a", "get_weather"),)),
            ChoiceEvent(tool_calls=(fn_args(0, '{"city": '),)),
            ChoiceEvent(tool_calls=(fn_args(0, '"Paris"}'), fn_start(1, "call_b", "get_time"))),
            ChoiceEvent(tool_calls=(fn_args(1, "{}"),)),
        ],
        finished("Checking both.", tool_calls=[TOOL_CALL_A, TOOL_CALL_B], finish_reason="tool_calls"),
    ),
    "cut in the text": (
        [ChoiceEvent(reasoning="hm"), ChoiceEvent(content="Hel")],
        finished("Hel", reasoning="hm", finish_reason="length"),
    ),
    "cut in the reasoning": ([ChoiceEvent(reasoning="hm")], finished(None, reasoning="hm", finish_reason="length")),
    "a custom call": (
        [
            ChoiceEvent(
                tool_calls=(
                    DeltaToolCall(index=0, id="call_k", type="custom", custom=DeltaCustom(name="run", input="")),
                )
            ),
            ChoiceEvent(tool_calls=(DeltaToolCall(index=0, custom=DeltaCustom(input="ls ")),)),
            ChoiceEvent(tool_calls=(DeltaToolCall(index=0, custom=DeltaCustom(input="-la")),)),
        ],
        finished(None, tool_calls=[RUN], finish_reason="tool_calls"),
    ),
}


def chunks(events, done: FinishedChoice):
    """The chunks ChatPipeline.stream sends for these choice events (the real ChunkFactory)."""
    factory = ChunkFactory("chatcmpl-1", 7, "m")
    out = [factory.role(0)] + [c for e in events if (c := factory.event(0, e)) is not None]
    usage = make_usage(
        done.counts.prompt_tokens, done.counts.completion_tokens, done.counts.cached_tokens, done.reasoning_tokens
    )
    return out + [factory.finish(0, done.result.finish_reason), factory.usage(usage)]


def streamed(events, done, req=None):
    stream = ResponseEventStream(builder(req))
    out = stream.start()
    for c in chunks(events, done):
        out += stream.feed(c)
    return out + stream.finish()


SDK_EVENTS = {
    cls.model_fields["type"].annotation.__args__[0]: cls for cls in oai.ResponseStreamEvent.__args__[0].__args__
}


def sdk_events(events):
    out = []
    for e in events:
        data = json.loads(e.model_dump_json())
        out.append(SDK_EVENTS[data["type"]].model_validate(data))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_stream_ends_with_the_response_the_completion_gives(name):
    events, done = SCENARIOS[name]
    stream = streamed(events, done)
    expected = builder().from_completion(completion("chatcmpl-1", 7, "m", [done]))
    final = stream[-1]
    assert final.type == ("response.incomplete" if done.result.finish_reason == "length" else "response.completed")
    assert final.response == expected
    assert [e.sequence_number for e in stream] == list(range(len(stream)))
    # every item is announced, then finished with what the response holds
    done_items = [e.item for e in stream if e.type == "response.output_item.done"]
    assert done_items == expected.output
    assert [e.output_index for e in stream if e.type == "response.output_item.added"] == list(
        range(len(expected.output))
    )


def test_two_parallel_calls_stream_in_the_spec_order():
    events, done = SCENARIOS["text then two parallel calls"]
    assert [e.type.removeprefix("response.") for e in streamed(events, done)] == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_openai_sdk_accumulator_reads_the_stream(name):
    """``client.responses.stream`` runs ResponseStreamState over the events: it asserts the
    item kinds at each index and rebuilds text and arguments from the deltas."""
    events, done = SCENARIOS[name]
    ours = streamed(events, done)
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    seen = [out for event in sdk_events(ours) for out in state.handle_event(event)]
    snapshots = {}
    for e in seen:
        if e.type in ("response.output_text.delta", "response.function_call_arguments.delta"):
            snapshots[e.output_index] = e.snapshot
    expected = ours[-1].response
    for index, item in enumerate(expected.output):
        if item.type == "message" and item.content[0].text:
            assert snapshots[index] == item.content[0].text
        if item.type == "function_call":
            assert snapshots[index] == item.arguments
    if done.result.finish_reason != "length":  # the SDK keeps only a response.completed
        final = state._completed_response
        assert final.output_text == (done.result.content or "") and len(final.output) == len(expected.output)


def test_the_stream_without_usage_or_finish_still_completes():
    stream = ResponseEventStream(builder())
    events = stream.feed(ChunkFactory("c", 7, "m").event(0, ChoiceEvent(content="x")))
    final = (events + stream.finish())[-1]
    assert final.type == "response.completed" and final.response.usage is None
    assert final.response.output[0].content[0].text == "x"


def test_a_fragment_for_a_closed_call_is_a_bug_not_a_quiet_mix():
    stream = ResponseEventStream(builder())
    stream.feed(
        ChunkFactory("c", 7, "m").event(0, ChoiceEvent(tool_calls=(fn_start(0, "a", "f"), fn_start(1, "b", "g"))))
    )
    with pytest.raises(ConversionError, match="tool call 0"):
        stream.feed(ChunkFactory("c", 7, "m").event(0, ChoiceEvent(tool_calls=(fn_args(0, "{}"),))))

"""The choice stage routes each piece of the generate stage by its phase (pure)."""

from __future__ import annotations

from runtime_ext.formats.reasoning_formats import QWEN3
from service.pipeline.choice import ChoiceOutput
from service.types.results import EngineDelta, Piece


def piece(phase, text, tokens, finish=None):
    return Piece(phase, EngineDelta(text, tokens, 5, 0, finish_reason=finish))


def test_take_routes_pieces_by_phase_and_finishes_on_the_last():
    out = ChoiceOutput(None, None, QWEN3)
    first = out.take(piece("reasoning", "think", 1))
    assert [(e.reasoning, e.content) for e in first.events] == [("think", "")] and first.result is None
    last = out.take(piece("answer", "hello", 2, finish="stop"))
    assert [e.content for e in last.events] == ["hello", ""] and last.events[0].reasoning == ""
    assert last.result.content == "hello" and last.result.reasoning == "think" and last.result.finish_reason == "stop"


def test_an_empty_piece_sends_no_event():
    out = ChoiceOutput(None, None)
    assert out.take(piece("answer", "", 0)).events == ()
    assert out.take(piece("answer", "", 0, finish="length")).result.finish_reason == "length"

"""The forced span grammar fast-forward appends, and how the setting reaches the scheduler and
the engine (the mechanism itself runs in tests/engine/test_grammar_fast_forward.py)."""

from __future__ import annotations

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.grammar_fast_forward import forced_span
from service.settings import EngineSettings
from service.startup import fast_forward_engine


def test_span_leaves_room_for_the_sampled_token():
    assert forced_span([5, 6, 7, 8], room=2, stop_ids=()) == [5, 6]
    assert forced_span([5, 6], room=0, stop_ids=()) == []
    assert forced_span([5, 6], room=-3, stop_ids=()) == []


def test_span_stops_before_a_stop_token():
    assert forced_span([5, 2, 7], room=10, stop_ids={2}) == [5]
    assert forced_span([2, 7], room=10, stop_ids={2}) == []
    assert forced_span([5, 6, 7], room=10, stop_ids={9}) == [5, 6, 7]


def test_setting_reaches_the_scheduler_environment():
    env: dict[str, str] = {}
    RuntimeExtConfig(fast_forward=True).export(env)
    assert RuntimeExtConfig.from_env(env).fast_forward is True
    RuntimeExtConfig().export(env)
    assert RuntimeExtConfig.from_env(env).fast_forward is False
    assert RuntimeExtConfig.from_env({}).fast_forward is False


def test_fast_forward_turns_the_overlap_schedule_off():
    engine = EngineSettings()
    assert engine.disable_overlap_schedule is False
    assert fast_forward_engine(True, engine).disable_overlap_schedule is True
    assert fast_forward_engine(False, engine).disable_overlap_schedule is False


def test_fast_forward_mixes_extends_with_the_running_decodes_unless_told_not_to():
    assert fast_forward_engine(True, EngineSettings()).sglang_args == {"enable_mixed_chunk": True}
    assert fast_forward_engine(False, EngineSettings()).sglang_args == {}
    told = EngineSettings(sglang_args={"enable_mixed_chunk": False, "log_requests": True})
    assert fast_forward_engine(True, told).sglang_args == told.sglang_args

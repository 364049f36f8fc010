"""bench/step_cost_rules.py: py-spy's raw stacks split per thread, the scheduler's event-loop thread
found, and each sample put in the part of a decode step it belongs to."""

from __future__ import annotations

from collections import Counter

from bench.step_cost_rules import by_thread, main_thread, parse_raw, scheduler_category, shares

LOOP = "thread (0x1): uvloop_0;<module> (x.py:1);Scheduler.event_loop_overlap (scheduler.py:900)"
RAW = [
    f"{LOOP};run_batch (scheduler.py:1);forward_batch_generation (tp_worker.py:2);forward (sglang/srt/models/llama.py:3);"
    "forward (runtime_ext/attention/native.py:4) 30",
    f"{LOOP};run_batch (scheduler.py:1);forward_batch_generation (tp_worker.py:2);sample (sglang/srt/layers/sampler.py:9) 10",
    f"{LOOP};process_batch_result (scheduler_output_processor_mixin.py:5) 20",
    f"{LOOP};recv_requests (scheduler.py:6);recv_pyobj (zmq/sugar/socket.py:7);Poller.poll (zmq/sugar/poll.py:8) 40",
    "thread (0x2);_bootstrap (threading.py:1);Condition.wait (threading.py:2) 100",
]


def test_the_event_loop_thread_is_the_one_measured() -> None:
    stacks = parse_raw(RAW)
    assert set(by_thread(stacks)) == {"thread (0x1): uvloop_0", "thread (0x2)"}
    loop = main_thread(stacks)
    assert sum(loop.values()) == 100  # the other thread's 100 idle samples are not the scheduler's


def test_each_sample_lands_in_its_part() -> None:
    loop = main_thread(parse_raw(RAW))
    parts, idle = shares(loop)
    assert parts["model: attention"] == 0.30 and parts["model: sampling"] == 0.10
    assert parts["scheduler: output processing"] == 0.20
    assert idle == 0.40  # waiting for requests in zmq's poll
    assert abs(sum(parts.values()) + idle - 1.0) < 1e-9


def test_model_time_wins_over_the_scheduler_frame_that_called_it() -> None:
    stack = "event_loop;process_batch_result (a.py:1);forward_batch_generation (b.py:2);linear.py (c:3)"
    assert scheduler_category(stack).startswith("model")
    assert scheduler_category("event_loop;get_next_batch_to_run (s.py:1);alloc_token_slots (a.py:2)") == (
        "scheduler: batch + KV alloc"
    )
    assert Counter(parse_raw(["a;b 3", "not a sample"])) == Counter({"a;b": 3})

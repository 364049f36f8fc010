"""The engine's scheduler process dies (SIGKILL) while two chat streams and a Responses stream
decode: each chat stream ends with an error event in the OpenAI envelope (``engine_unavailable``)
and ``[DONE]``, the Responses stream with its ``error`` event, none with a dropped connection;
``/ready`` goes from 200 to 503 and then the port closes, never back to 200; the process exits 1
within seconds and leaves no engine process behind.

Its own short-lived server (the tiny Qwen3): the test kills that server's engine.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import psutil
import pytest

from tests.server import ServerProcess

CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
STORY = "Tell me a very long story."
MAX_TOKENS = 2000  # three fit the KV pool (8192 tokens); still decoding when the scheduler dies


@pytest.fixture
def doomed_server(assets):
    server = ServerProcess(
        assets.qwen3_tiny,
        "qwen-engine-death",
        env={"STRUCTSERVE_DTYPE": "float32", "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false"},
    )
    server.start()
    warm_up = {"model": server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(f"{server.base_url}{CHAT}", json=warm_up, timeout=300)  # the first forward builds kernels
    assert r.status_code == 200, r.text
    children = psutil.Process(server.proc.pid).children(recursive=True)
    yield server, children
    server.stop()  # a no-op once it exited; otherwise the test failed: do not leave it running
    for child in children:
        if child.is_running():
            child.kill()


def scheduler(children: list[psutil.Process]) -> psutil.Process:
    found = [c for c in children if "scheduler" in (c.name() + " ".join(c.cmdline())).lower()]
    assert len(found) == 1, [(c.pid, c.name()) for c in children]
    return found[0]


class Stream(threading.Thread):
    """One streamed request read to its end; ``frames`` are its data payloads."""

    def __init__(self, server: ServerProcess, path: str) -> None:
        super().__init__(daemon=True)
        self.server, self.path, self.frames, self.error = server, path, [], None
        model = {"model": server.model_name, "stream": True}
        if path == CHAT:
            self.body = model | {"messages": [{"role": "user", "content": STORY}], "max_tokens": MAX_TOKENS}
        else:
            self.body = model | {"input": STORY, "max_output_tokens": MAX_TOKENS}

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=120) as client,
                client.stream("POST", f"{self.server.base_url}{self.path}", json=self.body) as r,
            ):
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.frames.append(line.removeprefix("data: "))
        except Exception as exc:  # a dropped connection (RemoteProtocolError) lands here
            self.error = exc

    def final_error(self) -> dict:
        """The error the stream ended with (chat: the envelope's ``error`` before ``[DONE]``)."""
        assert self.error is None, f"the connection dropped without an error event: {self.error!r}"
        if self.path == RESPONSES:  # the error event is the last one (no [DONE], as OpenAI)
            event = json.loads(self.frames[-1])
            assert event["type"] == "error", event
            return event
        *_, last, done = self.frames
        assert done == "[DONE]", self.frames[-3:]
        return json.loads(last)["error"]


def watch_ready(server: ServerProcess, seen: list[str], stop: threading.Event) -> None:
    """Append each /ready outcome when it changes: "200", "503", "closed" (a last poll after ``stop``)."""
    while True:
        try:
            outcome = str(httpx.get(f"{server.base_url}/ready", timeout=2).status_code)
        except httpx.TransportError:
            outcome = "closed"
        if not seen or seen[-1] != outcome:
            seen.append(outcome)
        if stop.is_set():
            return
        time.sleep(0.05)


def test_streams_end_with_an_error_event_ready_turns_503_and_the_process_exits_1(doomed_server):
    server, children = doomed_server
    streams = [Stream(server, CHAT), Stream(server, CHAT), Stream(server, RESPONSES)]
    for stream in streams:
        stream.start()
    deadline = time.monotonic() + 120
    while not all(len(s.frames) >= 4 for s in streams):  # the opening frames and some text: decoding
        assert time.monotonic() < deadline and all(s.is_alive() for s in streams), [s.frames[-2:] for s in streams]
        time.sleep(0.05)
    seen, stop = [], threading.Event()
    watcher = threading.Thread(target=watch_ready, args=(server, seen, stop), daemon=True)
    watcher.start()
    killed_at = time.monotonic()
    scheduler(children).send_signal(signal.SIGKILL)

    for stream in streams:
        stream.join(timeout=30)
        assert not stream.is_alive(), "the stream must end, not hang"
        error = stream.final_error()
        assert error["code"] == "engine_unavailable" and "scheduler_0" in error["message"], error
    code = server.proc.wait(timeout=30)
    exited_after = time.monotonic() - killed_at
    stop.set()
    watcher.join(timeout=5)
    print(f"\nstreams failed, the process exited {exited_after:.1f} s after the kill; /ready: {seen}")
    assert code == 1, f"exit code {code}; log:\n{server.log_tail()}"
    assert exited_after < 15, "the watchdog notices within 1 s, /ready lingers 1 s, then the process exits"
    assert seen[0] == "200" and seen[1:] == ["503", "closed"], seen  # 503 before the port closes, never 200 again
    left = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"engine processes left running: {left}"

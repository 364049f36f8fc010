"""SGLang's signal handling in the serving process, adapted to the service.

SGLang's ``TokenizerManager`` installs handlers on the serving loop for two signals:
- SIGTERM: SGLang's own graceful exit. Ours forwards it to the handler the process had
  (uvicorn's, which drains: ``service.serving``).
- SIGQUIT: SGLang's subprocess watchdog sends it (within a second) when an engine process has
  exited, and SGLang's handler SIGKILLs the process tree: every client connection drops with
  no answer. Ours calls ``EngineDeath.on_child_death`` instead.

``EngineDeath``: once an engine process is gone no request can finish. Every request waiting in
the tokenizer manager is finished as an abort (SGLang's own abort path, ``_handle_abort_req``)
with status 503 and the message ``DEATH`` + which process died: a stream gets it as its last
output, a non-streamed request raises it, and ``service.engine`` turns it into
``EngineUnavailableError``. The sweep repeats every ``SWEEP_S`` for requests that reach the
tokenizer manager later. Then the ``listeners`` hear it (the service answers 503 on /ready and
exits 1 once the requests in flight have their error).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any, Callable

from service.errors import EngineUnavailableError

log = logging.getLogger(__name__)
DEATH = "structserve: engine process died: "
SWEEP_S = 0.25


class EngineDeath:
    def __init__(self, tokenizer_manager: Any) -> None:
        self._tm = tokenizer_manager
        self.reason: str | None = None
        self.listeners: list[Callable[[str], None]] = []
        self._sweeper: asyncio.Task[None] | None = None

    def on_child_death(self) -> None:
        """SIGQUIT on the serving loop: fail what is in flight, tell the listeners (once)."""
        if self.reason is not None:
            return
        self.reason = _which_died(self._tm)
        log.error("engine: %s; every request in flight ends with an error and the server exits", self.reason)
        failed = self.fail_inflight()
        log.error("engine: %d request(s) in flight failed", failed)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        for listener in self.listeners:
            listener(self.reason)

    def fail_inflight(self) -> int:
        from sglang.srt.managers.io_struct import AbortReq

        rids = list(self._tm.rid_to_state)
        reason = {"type": "abort", "message": DEATH + str(self.reason), "status_code": 503}
        for rid in rids:
            try:
                self._tm._handle_abort_req(AbortReq(rid=rid, finished_reason=reason))
            except Exception:  # one request's bookkeeping must not keep the others waiting
                log.exception("engine: cannot fail request %s", rid)
        return len(rids)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            self.fail_inflight()

    def check(self) -> None:
        """Raise ``EngineUnavailableError`` once the engine is gone (before sending it anything)."""
        if self.reason is not None:
            raise unavailable(self.reason)


def unavailable(reason: str) -> EngineUnavailableError:
    return EngineUnavailableError(
        f"the engine stopped while serving this request ({reason}); this server is exiting: retry on another replica"
    )


def _which_died(tm: Any) -> str:
    """``scheduler_0 (pid 123) exited with code -9``, from SGLang's watchdog (a generic text without it)."""
    watchdog = getattr(tm, "_subprocess_watchdog", None)
    processes, names = getattr(watchdog, "_processes", None) or [], getattr(watchdog, "_names", None) or []
    for proc, name in zip(processes, names):
        if not proc.is_alive() and proc.exitcode != 0:
            return f"{name} (pid {proc.pid}) exited with code {proc.exitcode}"
    return "an engine process exited"


def signal_handler_class(death: EngineDeath) -> type:
    """The ``TokenizerManager.signal_handler_class`` of the service (see the module docstring)."""
    from sglang.srt.managers.tokenizer_manager import SignalHandler

    class ServiceSignalHandler(SignalHandler):
        def __init__(self, tokenizer_manager: Any):
            super().__init__(tokenizer_manager)
            self._previous = signal.getsignal(signal.SIGTERM)

        def sigterm_handler(self, signum: Any = None, frame: Any = None) -> None:
            if callable(self._previous):
                self._previous(signal.SIGTERM, frame)
            else:
                super().sigterm_handler(signum, frame)

        def running_phase_sigquit_handler(self, signum: Any = None, frame: Any = None) -> None:
            death.on_child_death()

    return ServiceSignalHandler

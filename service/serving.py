"""The HTTP server process: uvicorn with a graceful drain on SIGTERM.

On the first SIGTERM (once serving): ``/ready`` answers 503 at once and new requests get 503
(the service state is ``draining``), the listener stays open so a load balancer sees both;
requests in flight run to completion, bounded by ``drain_timeout_s``; then uvicorn shuts down
(engine last) and ``serve`` returns, so the process exits 0. A second SIGTERM or SIGINT ends the
drain at once (uvicorn's own shutdown path). When an engine process dies, ``stop_after_inflight``
ends the server once the requests in flight have their error (``service.engine_signals``) and
``/ready`` has answered 503 for ``linger_s`` (a load balancer probing it sees why).
"""

from __future__ import annotations

import logging
import signal
import time
from types import FrameType

import uvicorn

from service.api.deps import ServiceState

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServiceState, drain_timeout_s: float) -> None:
        super().__init__(config)
        self.state, self.drain_timeout_s = state, drain_timeout_s
        self.drain_deadline: float | None = None
        self.linger_until = 0.0  # not before this, even with nothing in flight

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self.started and self.drain_deadline is None:
            self.state.draining = True
            self.drain_deadline = time.monotonic() + self.drain_timeout_s
            log.info(
                "SIGTERM: draining %d in-flight request(s), at most %.0f s",
                self.state.counters["inflight"],
                self.drain_timeout_s,
            )
            return
        super().handle_exit(sig, frame)

    def stop_after_inflight(self, linger_s: float, grace_s: float) -> None:
        """Shut down once no request is in flight and ``linger_s`` has passed, at most ``grace_s`` from now."""
        now = time.monotonic()
        self.linger_until = now + linger_s
        self.drain_deadline = now + grace_s if self.drain_deadline is None else min(self.drain_deadline, now + grace_s)

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is not None and not self.should_exit:
            left, now = self.state.counters["inflight"], time.monotonic()
            if (left == 0 and now >= self.linger_until) or now >= self.drain_deadline:
                if left:
                    log.warning("drain timeout: %d request(s) still running are cut off", left)
                log.info("drained; shutting down")
                self.should_exit = True
        return await super().on_tick(counter)

"""Pure ASGI middleware in front of the app (BaseHTTPMiddleware would get between a stream and
its client's disconnect).

``RequestContext`` (outermost, every path): request id (``X-Request-Id`` honoured when sane,
else generated; returned on the response), one JSON access log line, request count and latency
by route and status, the count of ``/v1/`` requests in flight (graceful drain waits on it).

``Gate`` (``/v1/`` paths, ``/tokenize``, ``/detokenize``): API key (its owner id into
``request.state``) → body size → per-key rate limit → (chat completions) 503 when not ready
(loading, failed, draining), else the running/queued bound. Refusals are typed errors rendered
by ``service.api.errors`` (the one place errors become HTTP).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any, Callable

from service import metrics as m
from service.api.errors import error_response
from service.errors import NotReadyError, PayloadTooLargeError, ServiceError
from service.limits import Admission, KeyRing, TokenBucket
from service.logs import REQUEST_ID

log = logging.getLogger("structserve.access")
_SANE_ID = re.compile(r"^[\w.:@/+=-]{1,128}$")
OWNER = "api_key_owner"  # request.state key: KeyRing.owner of the request's API key
ADMITTED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
UNVERSIONED = ("/tokenize", "/detokenize")  # vLLM's paths outside /v1/: gated as /v1/ is


def gated(path: str) -> bool:
    return path.startswith("/v1/") or path in UNVERSIONED


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class RequestContext:
    def __init__(self, app: Any, counters: dict[str, int]) -> None:
        self.app, self.counters = app, counters  # counters["inflight"]: /v1/ requests being served

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        rid = given if given and _SANE_ID.match(given) else f"req-{uuid.uuid4().hex}"
        token, start, status = REQUEST_ID.set(rid), time.perf_counter(), {"code": 500}
        api = gated(scope["path"])

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message = message | {"headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        self.counters["inflight"] += api
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.counters["inflight"] -= api
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            m.REQUESTS.labels(route=route, status=str(status["code"])).inc()
            m.LATENCY.labels(route=route).observe(elapsed)
            log.info(
                "%s %s %d",
                scope["method"],
                scope["path"],
                status["code"],
                extra={"status": status["code"], "path": scope["path"], "ms": round(elapsed * 1000, 1)},
            )
            REQUEST_ID.reset(token)


class Gate:
    def __init__(
        self,
        app: Any,
        keys: KeyRing,
        max_body: int,
        admission: Admission,
        bucket: TokenBucket | None,
        not_ready: Callable[[], str | None],
    ) -> None:
        self.app, self.keys, self.max_body, self.admission, self.bucket = app, keys, max_body, admission, bucket
        self.not_ready = not_ready

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not gated(scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            key = self.keys.check(_credentials(scope))
            scope.setdefault("state", {})[OWNER] = self.keys.owner(key)  # request.state: stored-object owner
            receive = await self._bounded_body(scope, receive)
            if self.bucket is not None:
                self.bucket.take(key, time.monotonic())
            admitted = scope["path"] in ADMITTED
            if admitted and (reason := self.not_ready()) is not None:
                raise NotReadyError(reason)  # not even queued: the load balancer retries elsewhere
            if admitted:
                queued_at = time.monotonic()
                await self.admission.acquire()
                m.SERVICE_QUEUE_SECONDS.observe(time.monotonic() - queued_at)
        except ServiceError as exc:
            await error_response(exc, scope["path"])(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            if admitted:
                self.admission.release()

    async def _bounded_body(self, scope: dict, receive: Any) -> Any:
        """Reads the whole body (at most ``max_body`` bytes) and replays it; later receives (the
        client's disconnect) go to the server."""
        declared = _header(scope, b"content-length")
        too_large = PayloadTooLargeError(
            f"request body larger than {self.max_body} bytes; send less (limits.max_body_bytes)", param=None
        )
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise too_large
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return _replay([message], receive)
            chunks.append(message.get("body", b""))
            size, more = size + len(chunks[-1]), message.get("more_body", False)
            if size > self.max_body:
                raise too_large
        return _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}], receive)


def _credentials(scope: dict) -> str | None:
    """The ``Authorization`` header; else Anthropic's ``x-api-key`` as the same bearer key."""
    given = _header(scope, b"authorization")
    if given is None and (key := _header(scope, b"x-api-key")) is not None:
        return f"Bearer {key}"
    return given


def _replay(messages: list[dict], receive: Any) -> Any:
    async def replayed() -> dict:
        return messages.pop(0) if messages else await receive()

    return replayed

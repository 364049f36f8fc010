"""Structured logs: one JSON object per line, with the id of the request being served.

``REQUEST_ID`` is a context variable set by the request middleware (``X-Request-Id`` honoured
or generated); every record logged while a request is handled carries it.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if (rid := REQUEST_ID.get()) is not None:
            out["request_id"] = rid
        out |= {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


_APPLIED: dict[str, str] = {}


def restore_logging() -> None:
    """SGLang's engine reconfigures the root logger when it starts: put ours back."""
    if _APPLIED:
        setup_logging(**_APPLIED)


def setup_logging(level: str, fmt: str = "json") -> None:
    _APPLIED.update(level=level, fmt=fmt)
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):  # uvicorn's own lines through the same handler
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True

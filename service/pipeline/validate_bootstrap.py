"""Validate-stage helper: the ``bootstrap_*`` fields SGLang's gateway (smg ``--pd-disaggregation``)
adds to every request it sends to a prefill and a decode replica.

A replica in a PD mode serves only such requests, each as one engine request (one transfer per
``bootstrap_room``); any other replica refuses the fields, naming them.
"""

from __future__ import annotations

from typing import Protocol

from service.errors import InvalidRequestError, UnsupportedParameterError
from service.types.plan import Bootstrap

FIELDS = ("bootstrap_host", "bootstrap_port", "bootstrap_room")


class HasBootstrap(Protocol):
    bootstrap_host: str | None
    bootstrap_port: int | None
    bootstrap_room: int | None


def bootstrap_of(req: HasBootstrap, mode: str | None, n: int) -> Bootstrap | None:
    """The request's transfer in PD mode (None when the replica serves whole requests)."""
    given = [name for name in FIELDS if getattr(req, name) is not None]
    if mode is None:
        if given:
            raise UnsupportedParameterError(
                f"'{given[0]}' is only accepted by a prefill or decode replica (prefill/decode "
                f"disaggregation behind a PD gateway); this server serves whole requests: remove {', '.join(given)}",
                param=given[0],
            )
        return None
    host, port, room = req.bootstrap_host, req.bootstrap_port, req.bootstrap_room
    if host is None or port is None or room is None:
        missing = [name for name in FIELDS if name not in given]
        raise InvalidRequestError(
            f"this server is the {mode} side of prefill/decode disaggregation: every request needs "
            f"{', '.join(FIELDS)} (send it through the PD gateway); missing '{missing[0]}'",
            param=missing[0],
        )
    if n != 1:
        raise UnsupportedParameterError(
            f"'n' must be 1 on a {mode} replica (one prefill/decode transfer per request), got {n}", param="n"
        )
    return Bootstrap(host=host, port=port, room=room)

"""The in-memory store behind ``store: true`` for ``POST /v1/responses`` (one replica).

A bounded LRU of the responses this process returned with ``store: true``: each entry keeps
the ``Response`` (for ``GET /v1/responses/{id}``) and the conversation it ends (the input
items of its request chain, then its output items), which a later request continues with
``previous_response_id``. Nothing is persisted or shared between replicas: behind a load
balancer, chain on the same replica (sticky sessions) or send the whole conversation
(``store`` defaults to false, as stateless serving needs).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from service.errors import NotFoundError
from service.protocol.responses import InputItem
from service.protocol.responses_output import Response

DEFAULT_CAPACITY = 1024


@dataclass(frozen=True)
class StoredResponse:
    response: Response
    conversation: tuple[InputItem, ...]  # what a request with previous_response_id continues


class ResponseStore:
    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response: Response, inputs: tuple[InputItem, ...]) -> None:
        entry = StoredResponse(response, inputs + tuple(response.output))
        with self._lock:
            self._entries[response.id] = entry
            self._entries.move_to_end(response.id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def get(self, response_id: str, param: str | None, code: str) -> StoredResponse:
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is not None:
                self._entries.move_to_end(response_id)
        if entry is None:
            raise NotFoundError(
                f"no stored response with id '{response_id}' on this server (responses are stored only "
                'with "store": true, in this replica\'s memory, for the most recent '
                f"{self.capacity}); send the whole conversation as 'input' instead",
                param=param,
                code=code,
            )
        return entry

"""What every front door shares: the field map from chat ``param`` paths back to the front's
own paths, the validation of the converted chat request against it, and the loop that turns
the chat pipeline's chunks into the front's stream events.

A front is three things around the one ``ChatPipeline``: ``convert_request`` (its request ->
a ``ChatCompletionRequest`` plus a ``ParamMap`` recording where each chat message came from),
the pipeline unchanged, and a builder out (the front's object from the ``ChatCompletion``, and
an ``EventStream`` from its chunks).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import ValidationError

from grammars.errors import GrammarError
from service.errors import InvalidRequestError, ServiceError
from service.protocol.openai import ChatCompletionChunk, ChatCompletionRequest

E = TypeVar("E")
Rewrite = tuple[re.Pattern[str], str]


@dataclass(frozen=True)
class Origin:
    """Where one chat message came from: ``path`` (the front's item or message) and the paths of
    its parts (None: use ``path``)."""

    path: str
    content: str | None = None
    reasoning: str | None = None
    calls: tuple[str, ...] = ()  # the front's path of each tool call, in order
    call_id: str | None = None  # a tool result's call id


@dataclass(frozen=True)
class ParamMap:
    """Chat ``param`` paths -> the front's. A front sets the class rules (``REWRITES`` for chat's
    wrappers, ``SAME`` and ``RENAMED`` for top-level fields, ``OUTSIDE`` for a message index the
    conversion never made) and how a message's parts map (``content_path``, ``call_path``)."""

    messages: tuple[Origin, ...] = ()
    REWRITES: ClassVar[tuple[Rewrite, ...]] = ()
    SAME: ClassVar[frozenset[str]] = frozenset()
    RENAMED: ClassVar[dict[str, str]] = {}
    OUTSIDE: ClassVar[str] = "messages"

    def to_front(self, param: str | None) -> str | None:
        """The front's path of a chat ``param`` (None for one the conversion never sets)."""
        if param is None:
            return None
        head, _, rest = param.partition(".")
        if head == "messages":
            return self._message(rest)
        for pattern, replacement in self.REWRITES:
            if pattern.match(param):
                return self.rewritten(pattern.sub(replacement, param, count=1))
        if head in self.SAME:
            return param
        return self.RENAMED.get(head)

    def rewritten(self, path: str) -> str:
        return path

    def _message(self, rest: str) -> str:
        index, _, field = rest.partition(".")
        if not index.isdigit() or int(index) >= len(self.messages):
            return self.OUTSIDE
        origin = self.messages[int(index)]
        name, _, sub = field.partition(".")
        if name == "content" and origin.content is not None:
            return self.content_path(origin.content, sub)
        if name in ("reasoning", "reasoning_content"):
            return origin.reasoning or origin.path
        if name == "tool_call_id":
            return origin.call_id or origin.path
        if name == "tool_calls" and origin.calls:
            return self.call_path(origin.calls, sub)
        return self.other_path(origin, name)

    def content_path(self, content: str, sub: str) -> str:
        return content

    def call_path(self, calls: tuple[str, ...], sub: str) -> str:
        return calls[0]

    def other_path(self, origin: Origin, name: str) -> str:
        return origin.path


_UNION_TAG = re.compile(r"[\[(']|^[A-Z][A-Za-z]+$|^(str|int|float|bool|dict|list|none)$")


def chat_request(payload: dict[str, Any], params: ParamMap) -> ChatCompletionRequest:
    """Validate the converted chat request; a failure is reported against the front's field it
    came from (pydantic's union tags dropped from the path)."""
    try:
        return ChatCompletionRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"] if not _UNION_TAG.search(str(p)))
        raise InvalidRequestError(first["msg"], param=params.to_front(loc)) from None


@contextmanager
def front_params(params: ParamMap) -> Iterator[None]:
    """Errors the chat pipeline raises inside name the front's field."""
    try:
        yield
    except (ServiceError, GrammarError) as exc:
        exc.param = params.to_front(exc.param)
        raise


class EventStream(Protocol[E]):
    """Chunks in, the front's stream events out."""

    def start(self) -> list[E]: ...

    def feed(self, chunk: ChatCompletionChunk) -> list[E]: ...

    def finish(self) -> list[E]: ...


@dataclass
class FrontEvents(Generic[E]):
    """One streamed request's events: ``start``, each chunk's, then ``finish``'s. A
    ``ServiceError`` after the start ends the stream with ``error``'s events (its param the
    front's); ``before_finish`` sees the final events before they are sent (a store), and its
    ``ServiceError`` also ends the stream."""

    stream: EventStream[E]
    params: ParamMap
    error: Callable[[ServiceError], list[E]]
    before_finish: Callable[[list[E]], Awaitable[None]] | None = None

    async def run(self, chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncIterator[E]:
        for event in self.stream.start():
            yield event
        try:
            async for chunk in chunks:
                for event in self.stream.feed(chunk):
                    yield event
        except ServiceError as exc:
            exc.param = self.params.to_front(exc.param)
            for event in self.error(exc):
                yield event
            return
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        final = self.stream.finish()
        if self.before_finish is not None:
            try:
                await self.before_finish(final)
            except ServiceError as exc:
                for event in self.error(exc):
                    yield event
                return
        for event in final:
            yield event

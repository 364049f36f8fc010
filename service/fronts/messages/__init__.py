"""``POST /v1/messages`` on the chat pipeline: the pure conversions around it, the same
pattern as ``service/fronts/responses``.

Not a stage: the route converts a ``MessagesRequest`` into a ``ChatCompletionRequest``
(``to_chat_request``, with the ``MessagesParamMap`` for error paths), runs ``ChatPipeline``,
and converts its ``ChatCompletion`` (``from_completion``) or its chunks
(``MessageEventStream``) back. Nothing here imports a stage.
"""

from service.fronts.messages.build_message import MessageEventStream, error_event, from_completion, new_message_id
from service.fronts.messages.convert_request import to_chat_request
from service.fronts.messages.param_map import MessagesParamMap

__all__ = [
    "MessageEventStream",
    "MessagesParamMap",
    "error_event",
    "from_completion",
    "new_message_id",
    "to_chat_request",
]

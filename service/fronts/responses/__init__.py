"""``POST /v1/responses`` on the chat pipeline: the pure conversions around it.

Not a stage: the route converts a ``ResponsesRequest`` into a ``ChatCompletionRequest``
(``to_chat_request``, with the ``ParamMap`` for error paths), runs ``ChatPipeline``, and
converts its ``ChatCompletion`` (``ResponseBuilder.from_completion``) or its chunks
(``ResponseEventStream``) back. Nothing here imports a stage.
"""

from service.fronts.responses.build_response import ResponseBuilder, new_id, outcome
from service.fronts.responses.convert_request import to_chat_request
from service.fronts.responses.event_stream import ResponseEventStream
from service.fronts.responses.param_map import ResponsesParamMap

__all__ = [
    "ResponsesParamMap",
    "ResponseBuilder",
    "ResponseEventStream",
    "new_id",
    "outcome",
    "to_chat_request",
]

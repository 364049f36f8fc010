"""``POST /v1/completions`` on the chat pipeline: ``convert_request`` (the validated request and
one prepared chat per prompt, no template) and the legacy objects back (``complete``, ``stream``)."""

from service.fronts.completions.build_completion import complete, stream
from service.fronts.completions.convert_request import PreparedCompletion, convert_request

__all__ = ["PreparedCompletion", "complete", "convert_request", "stream"]

"""Typed errors raised anywhere in the service. ``service/api/errors.py`` maps them to HTTP.

Each error carries what the OpenAI envelope needs: a message that says what to
change, the offending parameter (dotted path into the request) and a code.

The errors a client is told about are one family of two roots: ``ServiceError`` (this
module; each class carries its HTTP status) and ``grammars.errors.GrammarError`` (raised
by the pure grammar layer, which knows no HTTP and may not import the service; always a
400). ``ClientError`` names both; the HTTP map handles exactly these, in one function.
"""

from __future__ import annotations

from typing import TypeAlias

from grammars.errors import GrammarError


class ServiceError(Exception):
    """Base class: an error the client is told about in the OpenAI error envelope."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequestError(ServiceError):
    """The request is malformed or asks for something this server cannot do (400)."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ModelNotFoundError(InvalidRequestError):
    """The request names a model this server does not serve (404, as OpenAI answers)."""

    status = 404
    code = "model_not_found"


class NotFoundError(InvalidRequestError):
    """The request names a stored object (a response id) this server does not hold (404)."""

    status = 404
    code = "not_found"


class ContextLengthError(InvalidRequestError):
    code = "context_length_exceeded"


class UnsupportedParameterError(InvalidRequestError):
    code = "unsupported_parameter"


class NotReadyError(ServiceError):
    """The engine is still loading or the server is draining (503)."""

    status = 503
    type = "service_unavailable"
    code = "not_ready"


class EngineError(ServiceError):
    """The engine failed while serving a valid request (500; a server-side bug or crash)."""

    status = 500
    type = "server_error"
    code = "engine_error"


class ConversionError(ServiceError):
    """The chat pipeline's output does not fit the front door's wire format (500: a server-side
    bug, e.g. a tool call's fragment after the next block began; a stream ends with an error event)."""

    status = 500
    type = "server_error"
    code = "conversion_error"


class NumericalFaultError(ServiceError):
    """The model's activations for this input went non-finite, or out of the INT8 KV cache's
    range (422: the same input fails the same way, so a client must not retry it unchanged)."""

    status = 422
    type = "invalid_request_error"
    code = "non_finite_activations"


class PDLinkDownError(ServiceError):
    """Prefill/decode disaggregation: the link between this request's prefill and decode replicas
    failed (decode: the prefill's port refuses connections, or SGLang's heartbeat lost it;
    prefill: a KV write to decode was refused or reset). The request ended at once and its KV
    pages are freed; a retry needs another prefill replica or the link back."""

    status = 502
    type = "server_error"
    code = "pd_link_down"


class SchemaResampleError(ServiceError):
    """A schema whose grammar is looser than the schema: no generated output validated within
    ``grammar.resample_attempts`` retries (422: never returned as if valid; see
    ``service/pipeline/resample.py``)."""

    status = 422
    type = "invalid_request_error"
    code = "schema_validation_failed"


class EngineUnavailableError(ServiceError):
    """An engine process died while serving the request; the server exits (503: retry on
    another replica)."""

    status = 503
    type = "service_unavailable"
    code = "engine_unavailable"


class AuthenticationError(ServiceError):
    """API keys are configured and the request has none, or an unknown one (401)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PayloadTooLargeError(ServiceError):
    """The request body is larger than ``limits.max_body_bytes`` (413)."""

    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class OverloadedError(ServiceError):
    """Too many requests running and queued, or the key's rate limit is spent (429).
    ``retry_after`` (seconds) becomes the ``Retry-After`` header."""

    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None):
        super().__init__(message, code=code)
        self.retry_after = max(1, int(retry_after))


class StoreUnavailableError(ServiceError):
    """The shared response store (Redis) cannot be reached (503 + Retry-After): the request
    needed it (``store: true``, ``previous_response_id``, ``GET /v1/responses/{id}``)."""

    status = 503
    type = "service_unavailable"
    code = "store_unavailable"

    def __init__(self, message: str, *, retry_after: int = 1, param: str | None = None):
        super().__init__(message, param=param)
        self.retry_after = max(1, int(retry_after))


class CompilerBusyServiceError(ServiceError):
    """The grammar compiler could not get the CPU it needed in time (503 + Retry-After): the
    server is overloaded, the schema is not at fault (``grammars.worker_clock``)."""

    status = 503
    type = "service_unavailable"
    code = "server_overloaded"

    def __init__(self, message: str, *, retry_after: int = 5, param: str | None = None):
        super().__init__(message, param=param)
        self.retry_after = max(1, int(retry_after))


ClientError: TypeAlias = ServiceError | GrammarError
"""Every error the client is told about in the OpenAI envelope (see the module docstring)."""

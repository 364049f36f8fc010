"""The one place errors become HTTP: every error leaves as the OpenAI envelope
``{"error": {"message", "type", "param", "code"}}``, except on Anthropic's routes
(``/v1/messages``…), where it leaves as Anthropic's ``{"type": "error", "error": {"type",
"message"}}`` with the field path leading the message."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from grammars.errors import GrammarError
from service.errors import ClientError, ServiceError

log = logging.getLogger(__name__)


def error_body(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


ANTHROPIC_ROUTES = ("/v1/messages",)  # and everything under it
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
# the discriminator values pydantic puts in ``loc`` after a list index (content block types) or
# after the field it discriminates (``tool_choice``, ``thinking``): not fields
_ANTHROPIC_TAGS = frozenset({"text", "tool_use", "tool_result", "thinking", "auto", "any", "tool", "none"})
_ANTHROPIC_TAGS |= {"enabled", "disabled"}


def _anthropic_loc(loc: list[str]) -> list[str]:
    tagged = ("tool_choice", "thinking")
    return [
        p
        for i, p in enumerate(loc)
        if not (p in _ANTHROPIC_TAGS and i and (loc[i - 1].isdigit() or loc[i - 1] in tagged))
    ]


def _deepest_first(errors: list[Any]) -> list[Any]:
    """Anthropic's content is ``str | list[block]``: the block's own complaint (the longest
    path) says more than "not a string"."""
    return sorted(errors, key=lambda e: -len(e.get("loc", ())))


def is_anthropic(path: str | None) -> bool:
    return path is not None and any(path == r or path.startswith(r + "/") for r in ANTHROPIC_ROUTES)


def anthropic_body(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI envelope ``body`` as Anthropic's: the type by status, the param in the message."""
    error = body["error"]
    type_ = _ANTHROPIC_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    message, param = error["message"], error.get("param")
    if param and param not in message:
        message = f"{param}: {message}"
    return {"type": "error", "error": {"type": type_, "message": message}}


def _enveloped(status: int, body: dict[str, Any], path: str | None) -> dict[str, Any]:
    return anthropic_body(status, body) if is_anthropic(path) else body


def _status_and_type(exc: ClientError) -> tuple[int, str]:
    """The HTTP status and envelope ``type`` of a client error: a service error carries its
    own; a grammar error (the pure grammar layer knows no HTTP) is a 400."""
    if isinstance(exc, GrammarError):
        return 400, "invalid_request_error"
    return exc.status, exc.type


def client_error_body(exc: ClientError) -> dict[str, Any]:
    return error_body(exc.message, _status_and_type(exc)[1], exc.param, exc.code)


def _response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=body, headers=headers)


def error_response(exc: ClientError, path: str | None = None) -> JSONResponse:
    """A typed error as its HTTP response (also used by the ASGI gate, outside FastAPI);
    ``path`` chooses the envelope."""
    status = _status_and_type(exc)[0]
    if status >= 500 and status != 503:
        log.error("server error: %s", exc.message)
    retry = getattr(exc, "retry_after", None)
    headers = {"Retry-After": str(retry)} if retry is not None else None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return _response(status, _enveloped(status, client_error_body(exc), path), headers)


# pydantic names the union member it tried in ``loc`` ("literal['a','b']", "NamedToolChoice",
# "str"): not a request field, so not part of ``param``.
_UNION_TAG = re.compile(r"[\[(']|^[A-Z][A-Za-z]+$|^(str|int|float|bool|dict|list|none)$")
_HINTS = {
    "tool_choice": "must be 'none', 'auto', 'required', {\"type\": \"function\", \"function\": "
    '{"name": NAME}} or {"type": "allowed_tools", "allowed_tools": {"mode": "auto"|'
    '"required", "tools": [...]}}',
}

# strict typed fields (no coercion, as OpenAI): say which JSON type to send
_TYPE_HINTS = {
    "bool_type": "must be a JSON boolean, true or false (not a string or a number)",
    "int_type": "must be a JSON integer such as 5 (not a string, a boolean or a number with a fraction)",
    "float_type": "must be a JSON number such as 0.5 (not a string or a boolean)",
}


def _validation_body(exc: RequestValidationError, anthropic: bool = False) -> dict[str, Any]:
    """Translate pydantic's first complaint into one message that says what to change."""
    errors = _deepest_first(list(exc.errors())) if anthropic else exc.errors()
    if not errors:
        return error_body("invalid request", "invalid_request_error", None, "invalid_request")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body" and not _UNION_TAG.search(str(p))]
    if anthropic:
        loc = _anthropic_loc(loc)
    param = ".".join(loc) or None
    kind = first.get("type", "")
    if kind == "json_invalid":
        ctx = first.get("ctx", {}).get("error", "")
        message = f"the request body is not valid JSON ({ctx}); send a JSON object"
        return error_body(message, "invalid_request_error", None, "invalid_json")
    if kind == "extra_forbidden":
        message = f"unknown or unsupported parameter '{param}'; remove it"
        return error_body(message, "invalid_request_error", param, "unsupported_parameter")
    if kind == "missing":
        what = f"'{param}' is required" if param else "a JSON request body is required"
        return error_body(what, "invalid_request_error", param, "missing_required_parameter")
    if kind == "none_required":  # the null-only fields of a returned message sent back
        message = f"'{param}' is only accepted as null (this server never produces it); remove it"
        return error_body(message, "invalid_request_error", param, "invalid_value")
    where = f"'{param}'" if param else "the request body"
    hint = _HINTS.get(param or "") or _TYPE_HINTS.get(kind) or first.get("msg", "invalid value")
    message = f"{where}: {hint}"
    extra = len(errors) - 1
    if extra:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return error_body(message, "invalid_request_error", param, "invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    @app.exception_handler(GrammarError)
    async def _client(request: Request, exc: ClientError) -> JSONResponse:
        return error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        path = request.url.path
        return _response(400, _enveloped(400, _validation_body(exc, is_anthropic(path)), path))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
        message, code = str(exc.detail), str(exc.status_code)
        if message == "There was an error parsing the body":  # FastAPI's text, e.g. RecursionError
            message = (
                "the request body could not be parsed: it is not valid JSON or is nested too "
                "deeply for the parser; send a flatter JSON object"
            )
            code = "invalid_json"
        if exc.status_code == 404:
            message = "no such route; see /docs for the API (e.g. POST /v1/chat/completions)"
        body = _enveloped(exc.status_code, error_body(message, type_, None, code), request.url.path)
        return _response(exc.status_code, body, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        body = error_body(f"internal server error ({type(exc).__name__})", "server_error", None, "internal_error")
        return _response(500, _enveloped(500, body, request.url.path))

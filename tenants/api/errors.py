"""The API's one exception handler: every error in OpenAI's shape, never a traceback.

`{"error": {"message", "type", "param", "code"}}`, as the gateway's OpenAI surface answers, so a
client handles both with the same code.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from tenants.api.error_shape import error_body

log = logging.getLogger(__name__)

TYPES = {
    status.HTTP_401_UNAUTHORIZED: ("invalid_request_error", "invalid_api_key"),
    status.HTTP_403_FORBIDDEN: ("permission_error", "permission_denied"),
    status.HTTP_404_NOT_FOUND: ("invalid_request_error", "not_found"),
    status.HTTP_405_METHOD_NOT_ALLOWED: ("invalid_request_error", "method_not_allowed"),
    status.HTTP_429_TOO_MANY_REQUESTS: ("rate_limit_error", "rate_limited"),
}


def _first_error(detail: Any, param: str | None = None) -> tuple[str | None, str, str]:
    """The first (param, message, code) of a DRF validation error, however it is nested."""
    if isinstance(detail, dict):
        name, value = next(iter(detail.items()))
        return _first_error(value, param or (None if name == "non_field_errors" else name))
    if isinstance(detail, list):
        return _first_error(detail[0], param)
    return param, str(detail), getattr(detail, "code", "invalid")


def openai_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None:
        log.exception("self-service API failed", exc_info=exc)
        body = error_body("The server failed to answer; try again.", "api_error", None, None)
        return Response(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if isinstance(exc, exceptions.ValidationError):
        param, message, code = _first_error(exc.detail)
        response.data = error_body(message, "invalid_request_error", param, f"invalid_{code}")
        return response
    type_, code = TYPES.get(response.status_code, ("api_error", "error"))
    if isinstance(exc, exceptions.NotAuthenticated):
        code = "missing_api_key"
    message = str(getattr(exc, "detail", exc))
    response.data = error_body(message, type_, None, code)
    return response

"""OpenAI's error shape, and the one exception every part of the request path raises."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class ApiError(Exception):
    """A failure that ends a request with an OpenAI-style error body and this status."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"

    def body(self) -> dict[str, object]:
        return error_body(self.message, self.type, self.param, self.code)

    def json_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


def error_body(
    message: str, type: str, param: str | None = None, code: str | int | None = None
) -> dict[str, object]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param, code)


def unauthorized(message: str = "Invalid API key.") -> ApiError:
    return ApiError(401, message, "authentication_error", None, "invalid_api_key")


def rate_limited(message: str, retry_after: float, code: str) -> ApiError:
    seconds = max(1, int(retry_after + 0.999))
    return ApiError(429, message, "rate_limit_error", None, code, {"retry-after": str(seconds)})

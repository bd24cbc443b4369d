"""The one exception every part of the request path raises, and its named constructors.

Each constructor is one kind of refusal with its status, OpenAI type and code, so the fifteen
places that refuse a request say what they mean. The body comes from `tenants.api.errors`, the one
home of OpenAI's error shape (the self-service API answers in it too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tenants.api.error_shape import error_body

RETRY_SOON = {"retry-after": "5"}


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


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unauthorized(message: str = "Invalid API key.") -> ApiError:
    # OpenAI answers a bad key with type invalid_request_error, code invalid_api_key.
    return ApiError(401, message, code="invalid_api_key")


def client_not_allowed() -> ApiError:
    return ApiError(
        403, "This address may not read this endpoint.", "permission_error", code="forbidden"
    )


def model_not_found(model: str) -> ApiError:
    return ApiError(
        404, f"The model '{model}' does not exist.", param="model", code="model_not_found"
    )


def endpoint_not_served(model: str, endpoint: str) -> ApiError:
    return ApiError(
        404,
        f"The model '{model}' is not served on this endpoint ({endpoint}); the routes that "
        "serve it declare which endpoints they serve.",
        param="model",
        code="model_not_found",
    )


def model_not_allowed(model: str) -> ApiError:
    return ApiError(
        403,
        f"This API key may not use the model '{model}'.",
        "permission_error",
        "model",
        "model_not_allowed",
    )


def method_not_allowed(methods: tuple[str, ...]) -> ApiError:
    return ApiError(
        405,
        f"Use {' or '.join(methods)} on this endpoint.",
        code="method_not_allowed",
        headers={"allow": ", ".join(methods)},
    )


def unknown_endpoint(method: str, path: str) -> ApiError:
    # OpenAI's own answer for a path it does not serve: 404, invalid_request_error, no code.
    return ApiError(404, f"Invalid URL ({method} {path}).", code="unknown_url")


def invalid_json(reason: str) -> ApiError:
    return ApiError(400, f"The request body is not valid JSON: {reason}.", code="invalid_json")


def invalid_text(param: str) -> ApiError:
    return ApiError(
        400,
        f"'{param}' holds text that is not valid Unicode (a lone surrogate such as \\ud800).",
        param=param,
        code="invalid_unicode",
    )


def too_large(limit: int) -> ApiError:
    return ApiError(
        413, f"The request body is larger than {limit} bytes.", code="request_too_large"
    )


def unsupported_media_type(media: str) -> ApiError:
    return ApiError(
        415,
        f"Content-Type must be application/json, not {media or 'empty'!r}.",
        code="unsupported_media_type",
    )


def rate_limited(message: str, retry_after: float, code: str) -> ApiError:
    seconds = max(1, int(retry_after + 0.999))
    return ApiError(429, message, "rate_limit_error", None, code, {"retry-after": str(seconds)})


def queue_timeout() -> ApiError:
    return ApiError(
        503,
        "The request waited too long in the queue; try again later.",
        "server_error",
        code="queue_timeout",
        headers=dict(RETRY_SOON),
    )


def no_backend(model: str) -> ApiError:
    return ApiError(
        503,
        f"No healthy backend serves '{model}' right now.",
        "server_error",
        code="no_backend",
        headers=dict(RETRY_SOON),
    )


def request_not_found(request_id: str) -> ApiError:
    return ApiError(
        404, f"No request {request_id!r} is queued or running for this key.", code="not_found"
    )


def previous_response_not_found(response_id: str) -> ApiError:
    """The same for an id that never existed, one that expired and one this key may not see."""
    return ApiError(
        404,
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def upstream_rejected(status: int, message: str) -> ApiError:
    return ApiError(status, message, code="upstream_rejected")


def upstream_failed(message: str) -> ApiError:
    return ApiError(502, f"The backend failed: {message}", "server_error", code="upstream_error")


def not_started() -> ApiError:
    return ApiError(
        503, "The gateway did not start; /readyz says why.", "server_error", code="not_started"
    )


def shutting_down() -> ApiError:
    return ApiError(
        503,
        "The gateway is shutting down; try again.",
        "server_error",
        code="shutting_down",
        headers=dict(RETRY_SOON),
    )


def scheduler_unavailable() -> ApiError:
    """Several processes share one scheduler through Redis, and Redis is unreachable."""
    return ApiError(
        503,
        "The gateway cannot reach its shared scheduler; try again.",
        "server_error",
        code="scheduler_unavailable",
        headers=dict(RETRY_SOON),
    )


def limits_unavailable() -> ApiError:
    """Rate limits and quota reservations live in Redis, shared by every process, and Redis is
    unreachable (or a tenant's admission guard stays taken): refusing is safer than letting a
    request past a limit no one can check."""
    return ApiError(
        503,
        "The gateway cannot reach the store its rate limits and quotas share; try again.",
        "server_error",
        code="limits_unavailable",
        headers=dict(RETRY_SOON),
    )


def internal_error() -> ApiError:
    return ApiError(
        500, "The gateway failed; this has been logged.", "server_error", code="internal_error"
    )


# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors), for /v1/messages.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error(exc: ApiError) -> dict[str, object]:
    """`exc` in Anthropic's error shape, as its SDKs read it: the type from the status."""
    kind = ANTHROPIC_TYPES.get(exc.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


# The refusals of /v1/files and /v1/batches.


def file_not_found(file_id: str) -> ApiError:
    # Another tenant's file is answered exactly so: nobody learns that an id exists.
    return ApiError(404, f"No such File object: {file_id}", param="id", code="not_found")


def batch_not_found(batch_id: str) -> ApiError:
    return ApiError(404, f"No batch found with id '{batch_id}'.", param="id", code="not_found")


def file_too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"The file is larger than the largest file this gateway takes ({limit} bytes).",
        param="file",
        code="file_too_large",
    )


def bad_upload(reason: str) -> ApiError:
    return invalid(f"The upload could not be read as a multipart form: {reason}.", "file")


def filename_too_long(most: int) -> ApiError:
    return invalid(
        f"The file's name is too long: at most {most} characters.", "file", "filename_too_long"
    )


def unsupported_purpose(purpose: str) -> ApiError:
    return invalid(
        f"'{purpose}' is not a supported purpose; this gateway takes files for 'batch'.",
        "purpose",
    )


def invalid_file(reason: str) -> ApiError:
    return invalid(f"The file is not a valid batch input (JSONL): {reason}", "file", "invalid_file")


def file_in_use(file_id: str, batch_id: str) -> ApiError:
    return invalid(
        f"The file {file_id} is the input of batch {batch_id}, which is still running; cancel it "
        "or wait for it to end first.",
        "file_id",
        "file_in_use",
    )


def cannot_cancel(batch_id: str, status: str) -> ApiError:
    return ApiError(
        409,
        f"Cannot cancel batch {batch_id}: its status is '{status}'.",
        param="batch_id",
        code="batch_not_cancellable",
    )

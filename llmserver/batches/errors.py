"""The refusals of `/v1/files` and `/v1/batches`, as named constructors of the one `ApiError`
(the same shape and the same helper as every other refusal of the gateway)."""

from __future__ import annotations

from llmserver.wire.errors import ApiError, invalid


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

"""Files and batches in OpenAI's JSON shapes (the `openai` SDK's `FileObject` and `Batch`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tenants.models import Batch, StoredFile


def _unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def file_object(f: StoredFile) -> dict[str, Any]:
    return {
        "id": f.pk,
        "object": "file",
        "bytes": f.bytes,
        "created_at": _unix(f.created_at),
        "expires_at": None,
        "filename": f.filename,
        "purpose": f.purpose,
        "status": "processed",
        "status_details": None,
    }


def batch_object(b: Batch) -> dict[str, Any]:
    return {
        "id": b.pk,
        "object": "batch",
        "endpoint": b.endpoint,
        "model": b.model or None,
        "errors": {"object": "list", "data": b.errors} if b.errors else None,
        "input_file_id": b.input_file_id,
        "completion_window": b.completion_window,
        "status": b.status,
        "output_file_id": b.output_file_id or None,
        "error_file_id": b.error_file_id or None,
        "created_at": _unix(b.created_at),
        "in_progress_at": _unix(b.in_progress_at),
        "expires_at": _unix(b.expires_at),
        "finalizing_at": _unix(b.finalizing_at),
        "completed_at": _unix(b.completed_at),
        "failed_at": _unix(b.failed_at),
        "expired_at": _unix(b.expired_at),
        "cancelling_at": _unix(b.cancelling_at),
        "cancelled_at": _unix(b.cancelled_at),
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "usage": {
            "input_tokens": b.input_tokens,
            "output_tokens": b.output_tokens,
            "total_tokens": b.input_tokens + b.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
        "metadata": b.metadata,
    }


def list_object(data: Sequence[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": list(data),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }

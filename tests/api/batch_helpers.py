"""Requests to `/v1/files` and `/v1/batches` through the ASGI application, and the batch inputs
the tests send."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from tests.api.conftest import MODEL
from tests.api.http_helpers import exchange

FINAL = {"completed", "failed", "expired", "cancelled"}


async def call(
    method: str,
    path: str,
    key: str | None,
    body: bytes = b"",
    query: str = "",
    content_type: str | None = None,
) -> tuple[int, dict[bytes, bytes], bytes]:
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    return await exchange(method, path, body, headers, key, query)


async def call_json(method: str, path: str, key: str | None, **kwargs: Any) -> tuple[int, Any]:
    status, _, body = await call(method, path, key, **kwargs)
    return status, json.loads(body)


def multipart(
    content: bytes, purpose: str | None = "batch", filename: str = "in.jsonl"
) -> tuple[bytes, str]:
    boundary = "llmserver" + uuid.uuid4().hex
    parts = []
    if purpose is not None:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'.encode()
        )
    parts.append(
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        + content
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


async def upload(key: str, content: bytes, purpose: str | None = "batch") -> tuple[int, Any]:
    body, content_type = multipart(content, purpose)
    return await call_json("POST", "/v1/files", key, body=body, content_type=content_type)


def chat_line(custom_id: str, max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": MODEL,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"Say something about {custom_id}"}],
        },
        **extra,
    }


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


async def create_batch(
    key: str, lines: list[dict[str, Any]], endpoint: str = "/v1/chat/completions"
) -> dict[str, Any]:
    status, uploaded = await upload(key, jsonl(lines))
    assert status == 200, uploaded
    request = {"input_file_id": uploaded["id"], "endpoint": endpoint, "completion_window": "24h"}
    status, batch = await call_json(
        "POST",
        "/v1/batches",
        key,
        body=json.dumps(request).encode(),
        content_type="application/json",
    )
    assert status == 200, batch
    return dict(batch)


async def get_batch(key: str, batch_id: str) -> dict[str, Any]:
    status, batch = await call_json("GET", f"/v1/batches/{batch_id}", key)
    assert status == 200, batch
    return dict(batch)


async def wait_batch(
    key: str, batch_id: str, until: Any = None, timeout: float = 20.0
) -> dict[str, Any]:
    """The batch once `until(batch)` holds (by default: once it has ended)."""
    until = until or (lambda b: b["status"] in FINAL)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        batch = await get_batch(key, batch_id)
        if until(batch):
            return batch
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"batch not there in time: {batch}")
        await asyncio.sleep(0.05)


async def content_lines(key: str, file_id: str) -> list[dict[str, Any]]:
    status, _, body = await call("GET", f"/v1/files/{file_id}/content", key)
    assert status == 200
    return [json.loads(line) for line in body.splitlines() if line.strip()]

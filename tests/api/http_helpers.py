"""One raw HTTP exchange through the ASGI application, any method, path, headers and body."""

from __future__ import annotations

import json
from typing import Any

from channels.testing import ApplicationCommunicator

from tests.api.conftest import read_all


async def exchange(
    method: str,
    path: str,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    key: str | None = None,
    query: str = "",
    app: Any = None,
) -> tuple[int, dict[bytes, bytes], bytes]:
    """`app`: the gateway's application unless a test built its own."""
    if app is None:
        from llmserver.asgi import application as app

    sent = list(headers or [])
    if key is not None:
        sent.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": query.encode(),
        "headers": sent,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    comm = ApplicationCommunicator(app, scope)
    await comm.send_input({"type": "http.request", "body": body, "more_body": False})
    return await read_all(comm)


def openai_error(body: bytes) -> dict[str, Any]:
    """The error object of an OpenAI-shaped error body; fails the test for any other shape."""
    data = json.loads(body)
    assert set(data) == {"error"}, data
    error = data["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    return dict(error)

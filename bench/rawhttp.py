"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for the overhead benchmark.

The load generator shares the machine's two cores with the gateway and the simulator, so it has
to be cheap: one pre-built request per target, no header objects, no JSON decoding. It reads
Content-Length or chunked bodies and counts SSE `data: {` events for streamed responses. Only
what the benchmark needs: POST, one request at a time per connection, 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import urlsplit


def build_request(url: str, path: str, body: dict, key: str | None) -> bytes:
    parts = urlsplit(url)
    raw = json.dumps(body).encode()
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Content-Type: application/json\r\n{auth}Content-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


class Connection:
    """One keep-alive connection; `send` returns (status, bytes of body, SSE data events)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send(self, request: bytes) -> tuple[int, int, int]:
        if self.writer is None:
            await self._open()
        assert self.reader is not None and self.writer is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        size = events = 0
        if b"transfer-encoding: chunked" in lower:
            while True:
                line = await self.reader.readline()
                length = int(line.split(b";", 1)[0], 16)
                if length == 0:
                    await self.reader.readline()
                    break
                data = await self.reader.readexactly(length + 2)
                size += length
                events += data.count(b"data: {")
        else:
            marker = lower.find(b"content-length:")
            if marker >= 0:
                end = lower.index(b"\r\n", marker)
                length = int(lower[marker + 15 : end])
                data = await self.reader.readexactly(length)
            else:
                data = await self.reader.read()
                await self.close()
            size, events = len(data), data.count(b"data: {")
        if b"connection: close" in lower:
            await self.close()
        return status, size, events

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

"""Server-Sent Events framing: split an upstream byte stream into whole events, cheaply.

Upstream chunks can split an event anywhere; the relay forwards whole `data:` events only, so it
can drop the usage chunk a client did not ask for and read token counts from it.
"""

from __future__ import annotations

import json
from typing import Any

DONE = b"[DONE]"


class EventSplitter:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The `data` payloads of every event completed by this chunk."""
        data = self._buffer + chunk
        if b"\r\n" in data:
            data = data.replace(b"\r\n", b"\n")
        *events, self._buffer = data.split(b"\n\n")
        payloads = []
        for event in events:
            lines = [
                line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
            ]
            if lines:
                payloads.append(b"\n".join(lines))
        return payloads


def usage_of(payload: bytes) -> dict[str, Any] | None:
    """The usage object of a chunk, if it carries one (looked for only where it can be)."""
    if b'"prompt_tokens"' not in payload:
        return None
    try:
        usage = json.loads(payload).get("usage")
    except (ValueError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None


def is_usage_only(payload: bytes) -> bool:
    """vLLM's final usage chunk has `choices: []`."""
    try:
        data = json.loads(payload)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("choices") == [] and "usage" in data


def frame(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"

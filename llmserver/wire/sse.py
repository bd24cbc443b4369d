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

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        """(name, data) of every event completed by this chunk; name None where the event has
        no `event:` line (OpenAI's chat and completions streams name none)."""
        data = self._buffer + chunk
        if b"\r\n" in data:
            data = data.replace(b"\r\n", b"\n")
        *events, self._buffer = data.split(b"\n\n")
        out: list[tuple[bytes | None, bytes]] = []
        for event in events:
            name: bytes | None = None
            lines = []
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    lines.append(line[5:].lstrip(b" "))
                elif line.startswith(b"event:"):
                    name = line[6:].strip()
            if lines:
                out.append((name, b"\n".join(lines)))
        return out


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


def frame(payload: bytes, name: bytes | None = None) -> bytes:
    if name is not None:
        return b"event: " + name + b"\ndata: " + payload + b"\n\n"
    return b"data: " + payload + b"\n\n"

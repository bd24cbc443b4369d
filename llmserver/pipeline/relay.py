"""Relay: one backend answer to the client, without buffering, counting what was delivered.

Streams are relayed event by event: the usage chunk a client did not ask for is dropped, the
backend's model name is replaced by the public one, the backend's response id by the gateway's
request id (so the body, `X-Request-Id`, the usage row and the logs name one id), and every event that carries generated text
is counted, so a stream cut by anyone is billed for what really reached the client. The
backend's own usage, where it sends one, replaces the counts.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from llmserver.api.errors import ApiError
from llmserver.api.sse import DONE, EventSplitter, is_usage_only, usage_of
from llmserver.api.validation import CompletionRequest
from llmserver.backends.upstream import BackendError, UpstreamClient

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
# An event with generated text: a chat delta's or a completion's non-empty "content"/"text".
_HAS_TEXT = re.compile(rb'"(?:content|text)": ?"[^"]')


class Sink(Protocol):
    """Where a completion goes: an HTTP response or a WebSocket. `needs_start` says whether it
    must `start()` (send headers) before it can tell the client anything, such as `queued`."""

    needs_start: bool

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None: ...
    async def queued(self, request_id: str, position: int, eta_s: float) -> None: ...
    async def event(self, payload: bytes) -> None: ...
    async def body(self, payload: bytes) -> None: ...
    async def finish(self) -> None: ...


class Relay:
    """Writes to `sink`; `on_start()` gives the response headers when the first token goes out.

    `opened`: the client has the headers (an error can then only be an event); `started`: it has
    generated content too (a retry on another backend is then impossible). A queued stream is
    opened early, to tell the client its place in the queue.
    """

    def __init__(
        self,
        sink: Sink,
        req: CompletionRequest,
        on_start: Callable[[], dict[str, str]],
        request_id: str,
    ) -> None:
        self.sink, self.req, self._on_start = sink, req, on_start
        self.request_id = request_id
        self._id_rename: tuple[bytes, bytes] | None = None
        self.opened = False
        self.started = False
        self.text_events = 0
        self.reported_prompt: int | None = None
        self.reported_completion: int | None = None

    @property
    def completion_tokens(self) -> int:
        """The backend's count where it sent one, else the text events delivered."""
        if self.reported_completion is not None:
            return self.reported_completion
        return self.text_events

    async def forward(self, client: UpstreamClient, upstream_model: str, priority: int) -> None:
        body = upstream_body(self.req, upstream_model)
        path = PATHS[self.req.kind]
        if self.req.stream:
            await self._stream(client, path, body, priority, upstream_model)
        else:
            await self._whole(client, path, body, priority)

    async def _whole(
        self, client: UpstreamClient, path: str, body: dict[str, Any], priority: int
    ) -> None:
        _status, data = await client.complete(
            path, body, priority=priority, request_id=self.request_id
        )
        self._take_usage(data.get("usage"))
        if "model" in data:
            data["model"] = self.req.model
        if "id" in data:
            data["id"] = self.request_id
        await self._start(stream=False)
        await self.sink.body(json.dumps(data).encode())
        await self.sink.finish()

    async def _stream(
        self,
        client: UpstreamClient,
        path: str,
        body: dict[str, Any],
        priority: int,
        upstream_model: str,
    ) -> None:
        rename = None
        if upstream_model != self.req.model:
            rename = (json.dumps(upstream_model).encode(), json.dumps(self.req.model).encode())
        splitter = EventSplitter()
        upstream = client.stream_chat(path, body, priority=priority, request_id=self.request_id)
        async with contextlib.aclosing(upstream) as chunks:
            async for chunk in chunks:
                for payload in splitter.feed(chunk):
                    await self._relay_event(payload, rename)
        if not self.started:
            raise BackendError(
                "The backend closed the stream without sending anything.", retryable=True
            )
        await self.sink.event(DONE)
        await self.sink.finish()

    async def _relay_event(self, payload: bytes, rename: tuple[bytes, bytes] | None) -> None:
        if payload == DONE:
            return
        usage = usage_of(payload)
        if usage is not None:
            self._take_usage(usage)
            if not self.req.include_usage and is_usage_only(payload):
                return
        if _HAS_TEXT.search(payload):
            self.text_events += 1
        if rename is not None:
            payload = _rename_field(payload, b"model", rename)
        payload = _rename_field(payload, b"id", self._id_rename or self._learn_id(payload))
        if not self.started:
            await self._start(stream=True)
        await self.sink.event(payload)

    async def _start(self, stream: bool) -> None:
        headers = self._on_start()
        if not self.opened:
            await self.sink.start(200, headers, stream=stream)
            self.opened = True
        self.started = True

    async def report_queued(self, position: int, eta_s: float) -> None:
        """Tell a waiting client where it stands; a stream's headers go out first (without
        X-Queue-Time-Ms, not known yet: a `: dispatched queue_time_ms=` comment follows)."""
        if self.sink.needs_start and not self.opened:
            await self.sink.start(200, {"x-request-id": self.request_id}, stream=True)
            self.opened = True
        await self.sink.queued(self.request_id, position, eta_s)

    async def fail(self, exc: ApiError) -> None:
        """After the first byte an error can only be one more event, then the end."""
        await self.sink.event(json.dumps(exc.body()).encode())
        await self.sink.event(DONE)
        await self.sink.finish()

    def _learn_id(self, payload: bytes) -> tuple[bytes, bytes]:
        """The upstream's chunk id, read once from the first chunk; every chunk of one stream
        carries the same, so later chunks are rewritten by a byte replace, without parsing."""
        try:
            upstream_id = json.loads(payload).get("id")
        except (ValueError, AttributeError):
            upstream_id = None
        self._id_rename = (b"", b"")  # nothing to rename; never parsed again
        if isinstance(upstream_id, str) and upstream_id != self.request_id:
            new = json.dumps(self.request_id).encode()
            self._id_rename = (json.dumps(upstream_id).encode(), new)
        return self._id_rename

    def _take_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int):
            self.reported_prompt = prompt
        if isinstance(completion, int):
            self.reported_completion = completion


def _rename_field(payload: bytes, name: bytes, rename: tuple[bytes, bytes]) -> bytes:
    """`"name": old` becomes `"name": new`, with or without the space after the colon; only
    that field's value, so a tool call's own "id" or a text that mentions the model stays."""
    old, new = rename
    if not old:
        return payload
    key = b'"' + name + b'":'
    payload = payload.replace(key + old, key + new)
    return payload.replace(key + b" " + old, key + b" " + new)


def upstream_body(req: CompletionRequest, upstream_model: str) -> dict[str, Any]:
    body = dict(req.body)
    body["model"] = upstream_model
    if req.stream:
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body

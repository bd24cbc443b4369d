"""Completions over a WebSocket, for interactive clients.

The client sends `{"type": "request", "id": ..., "endpoint": "chat"|"completions", "body": {...}}`
and receives `chunk` messages (the OpenAI chunk as `data`), then `done`; or one `response`; or an
`error`. `{"type": "cancel", "id": ...}` or closing the socket cancels. Several requests may run
on one socket, in sequence or at once. The key comes from the Authorization header or, for
browsers that cannot set headers, the `api_key` query parameter. A socket whose key is revoked,
deleted or expired is closed with code 4401 within about `KEY_RECHECK_SECONDS` of the change
reaching this process (at once from this process's admin, within the configuration watch's
interval from any other), even while idle; its requests under way are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer

from llmserver.api.auth import authenticate, bearer
from llmserver.pipeline.completion import Completion, new_request_id
from llmserver.pipeline.port import RequestPort
from llmserver.process import get_gateway
from llmserver.runtime.keys import KeyCache, KeyInfo
from llmserver.wire.errors import ApiError, internal_error, invalid
from llmserver.wire.validation import validate

log = logging.getLogger(__name__)
MAX_OPEN_REQUESTS = 8
# How often an open socket looks whether its key may have changed: an integer compared while
# nothing changed, the key resolved again (through the cache) when the configuration did.
KEY_RECHECK_SECONDS = 1.0
UNAUTHORIZED = 4401


class SocketSink:
    needs_start = False
    embeds_events = True

    def __init__(self, consumer: CompletionSocketConsumer, request_id: str) -> None:
        self.consumer, self.id = consumer, json.dumps(request_id)

    async def queued(self, request_id: str, position: int, eta_s: float) -> None:
        """`id` names the request on this socket; `request_id` is the server's id for it."""
        await self.consumer.send(
            text_data=json.dumps(
                {
                    "type": "queued",
                    "id": json.loads(self.id),
                    "request_id": request_id,
                    "position": position,
                    "eta_s": round(eta_s, 1),
                }
            )
        )

    async def dispatched(self, queue_time_ms: str) -> None:
        """Never called: a socket's `start` event waits for the first token and carries the
        queue time in its headers."""

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None:
        await self.consumer.send(
            text_data=json.dumps({"type": "start", "id": json.loads(self.id), "headers": headers})
        )

    async def event(self, payload: bytes, name: bytes | None = None) -> None:
        if payload == b"[DONE]":
            await self.consumer.send(text_data=f'{{"type": "done", "id": {self.id}}}')
            return
        await self.consumer.send(
            text_data=f'{{"type": "chunk", "id": {self.id}, "data": {payload.decode()}}}'
        )

    async def body(self, payload: bytes) -> None:
        await self.consumer.send(
            text_data=f'{{"type": "response", "id": {self.id}, "data": {payload.decode()}}}'
        )

    async def finish(self) -> None:
        return None


class CompletionSocketConsumer(AsyncWebsocketConsumer):
    channel_layer_alias = None  # type: ignore[assignment]  # Channels' documented "no layer"

    async def connect(self) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}
        gw = await get_gateway()
        self.port: RequestPort = gw
        self.keys: KeyCache = gw.keys
        secret = bearer(self.scope.get("headers", []))
        if secret is None:
            query = parse_qs(self.scope.get("query_string", b"").decode())
            secret = next(iter(query.get("api_key", [])), None)
        self.secret = secret
        self.watch: asyncio.Task[None] | None = None
        try:
            key = await authenticate(self.keys, secret)
        except ApiError:
            await self.close(code=UNAUTHORIZED)
            return
        await self.accept()
        self.watch = asyncio.ensure_future(self._watch_key(key))

    async def disconnect(self, code: int) -> None:
        watch = getattr(self, "watch", None)
        if watch is not None:
            watch.cancel()
        for task in list(getattr(self, "tasks", {}).values()):
            task.cancel()

    async def _watch_key(self, key: KeyInfo) -> None:
        """Close the socket once its key no longer authenticates: looked at again whenever the
        key cache was cleared (revocation, deletion, any configuration change) or the key's
        expiry passed."""
        seen = self.keys.generation
        while True:
            await asyncio.sleep(KEY_RECHECK_SECONDS)
            expired = key.expires_at is not None and key.expires_at.timestamp() <= time.time()
            generation = self.keys.generation
            if generation == seen and not expired:
                continue
            try:
                key = await authenticate(self.keys, self.secret)
            except ApiError:
                for task in list(self.tasks.values()):
                    task.cancel()
                with contextlib.suppress(Exception):
                    await self.close(code=UNAUTHORIZED)
                return
            except Exception:
                log.warning("rechecking a socket's key failed; will retry", exc_info=True)
                continue
            seen = generation

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = json.loads(text_data or "")
            if not isinstance(message, dict):
                raise ValueError
        except (ValueError, RecursionError):
            await self._error(None, invalid("Each message must be a JSON object."))
            return
        kind, request_id = message.get("type"), message.get("id")
        if not isinstance(request_id, str) or not request_id or len(request_id) > 64:
            await self._error(None, invalid("'id' must be a string of 1 to 64 characters.", "id"))
            return
        if kind == "cancel":
            task = self.tasks.get(request_id)
            if task is not None:
                task.cancel()
            return
        if kind != "request":
            await self._error(request_id, invalid("'type' must be 'request' or 'cancel'.", "type"))
            return
        if request_id in self.tasks or len(self.tasks) >= MAX_OPEN_REQUESTS:
            await self._error(
                request_id,
                invalid("That id is in use, or too many requests are open on this socket.", "id"),
            )
            return
        self.tasks[request_id] = asyncio.ensure_future(self._run(request_id, message))

    async def _run(self, request_id: str, message: dict[str, Any]) -> None:
        try:
            endpoint = message.get("endpoint", "chat")
            if endpoint not in ("chat", "completions"):
                raise invalid("'endpoint' must be 'chat' or 'completions'.", "endpoint")
            body = message.get("body")
            if not isinstance(body, dict):
                raise invalid("'body' must be a JSON object.", "body")
            # Each request is authorised as a new HTTP request would be (from the key cache,
            # which revocation, deletion and expiry empty): a key gone since the socket opened
            # is refused, and the socket closed (below).
            key = await authenticate(self.keys, self.secret)
            req = validate(endpoint, body, key.token_limits(self.port.settings))
            # The client's id only names the request on this socket; clients reuse ids.
            await Completion(
                self.port,
                key,
                req,
                SocketSink(self, request_id),
                new_request_id(),
                self._trace_context(message),
            ).run()
        except ApiError as exc:
            await self._error(request_id, exc)
            if exc.status == 401:
                await self.close(code=UNAUTHORIZED)
        except asyncio.CancelledError:
            if message.get("type") == "request":
                await self._send_quietly({"type": "cancelled", "id": request_id})
            raise
        except Exception:
            log.exception("websocket request %s failed", request_id)
            await self._error(request_id, internal_error())
        finally:
            self.tasks.pop(request_id, None)

    def _trace_context(self, message: dict[str, Any]) -> Iterable[tuple[bytes, bytes]]:
        """The request's trace context: its message's `traceparent` and `tracestate` (each
        request on a socket may belong to a different trace), else the handshake's headers."""
        fields = [
            (name.encode(), value.encode("latin-1", "replace"))
            for name in ("traceparent", "tracestate")
            if isinstance(value := message.get(name), str) and len(value) <= 512
        ]
        return fields or self.scope.get("headers", ())

    async def _error(self, request_id: str | None, exc: ApiError) -> None:
        await self._send_quietly(
            {"type": "error", "id": request_id, "status": exc.status, **exc.body()}
        )

    async def _send_quietly(self, data: dict[str, Any]) -> None:
        try:
            await self.send(text_data=json.dumps(data))
        except Exception:
            return

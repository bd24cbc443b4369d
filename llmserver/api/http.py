"""The OpenAI-compatible HTTP endpoints, as Channels async consumers.

The completion runs as a task beside a watcher for `http.disconnect`: a client that goes away
cancels the task, which aborts the upstream request or leaves the queue, and releases the slot.
A stream is billed what was delivered: what went to the ASGI send, and whose send returned,
before the disconnect was read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from asgiref.typing import HTTPRequestEvent
from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from llmserver.api.access import metrics_refusal
from llmserver.api.auth import authenticate, bearer
from llmserver.pipeline.completion import Completion, new_request_id
from llmserver.pipeline.port import RequestPort
from llmserver.process import get_gateway
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.agent_apis import validate_messages, validate_responses
from llmserver.wire.errors import (
    ApiError,
    anthropic_error,
    internal_error,
    method_not_allowed,
    model_not_found,
    not_started,
    shutting_down,
    too_large,
    unknown_endpoint,
)
from llmserver.wire.scoring import validate_rerank, validate_score
from llmserver.wire.sse import frame
from llmserver.wire.validation import CompletionRequest, TokenLimits, parse_json, validate

log = logging.getLogger(__name__)
JSON = [(b"content-type", b"application/json")]
SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def header(scope: Mapping[str, Any], name: bytes) -> str | None:
    """A request header's value, or None; shared with the consumers of other modules."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class JsonHttpConsumer(AsyncHttpConsumer):
    """Shared plumbing: no channel layer per request (it costs a channel), OpenAI error bodies."""

    channel_layer_alias = None  # type: ignore[assignment]  # Channels' documented "no layer"
    methods: tuple[str, ...] = ("GET", "HEAD")

    async def authorized(self) -> tuple[RequestPort, KeyInfo]:
        """The method check and the bearer key every keyed endpoint starts with, then what a
        request of that key may use; raises ApiError."""
        refusal = self.method_allowed()
        if refusal:
            raise refusal
        gw = await get_gateway()
        return gw, await authenticate(gw.keys, bearer(self.scope.get("headers", [])))

    def route_arg(self, name: str) -> str:
        """A path parameter captured by the URL router (it adds `url_route` to the scope)."""
        scope: Mapping[str, Any] = self.scope
        return str(scope["url_route"]["kwargs"][name])

    async def send_json(
        self, status: int, data: Any, headers: dict[str, str] | None = None
    ) -> None:
        """A HEAD gets the status and headers a GET would, with the length but not the body."""
        payload = json.dumps(data).encode()
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        extra.append((b"content-length", str(len(payload)).encode()))
        if self.scope["method"] == "HEAD":
            payload = b""
        await self.send_response(status, payload, headers=JSON + extra)

    async def send_error(self, exc: ApiError, request_id: str | None = None) -> None:
        headers = dict(exc.headers)
        if request_id:
            headers["x-request-id"] = request_id
        await self.send_json(exc.status, exc.body(), headers)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' own dispatch first runs `close_old_connections` in the sync thread for every
        message: a thread hop per request. These consumers never use the database from that
        thread (their queries run in worker threads), so the message goes straight through."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    def method_allowed(self) -> ApiError | None:
        if self.scope["method"] in self.methods:
            return None
        return method_not_allowed(self.methods)


class CompletionSink:
    """Writes a completion to the HTTP response: SSE events, or one JSON body."""

    needs_start = True
    embeds_events = False

    def __init__(self, consumer: AsyncHttpConsumer) -> None:
        self.consumer = consumer

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None:
        extra = [(k.encode(), v.encode()) for k, v in headers.items()]
        await self.consumer.send_headers(status=status, headers=(SSE if stream else JSON) + extra)

    async def event(self, payload: bytes, name: bytes | None = None) -> None:
        await self.consumer.send_body(frame(payload, name), more_body=True)

    async def queued(self, request_id: str, position: int, eta_s: float) -> None:
        """An SSE comment line: OpenAI's SDKs skip those, raw clients can read it."""
        line = f": queued position={position} eta_s={eta_s:.1f}\n\n"
        await self.consumer.send_body(line.encode(), more_body=True)

    async def dispatched(self, queue_time_ms: str) -> None:
        """After early headers, the real X-Queue-Time-Ms as a comment before the first token."""
        line = f": dispatched queue_time_ms={queue_time_ms}\n\n"
        await self.consumer.send_body(line.encode(), more_body=True)

    async def body(self, payload: bytes) -> None:
        await self.consumer.send_body(payload, more_body=True)

    async def finish(self) -> None:
        await self.consumer.send_body(b"", more_body=False)


class CompletionsConsumer(JsonHttpConsumer):
    """POST /v1/chat/completions (kind "chat") and /v1/completions (kind "completions")."""

    kind = "chat"
    methods = ("POST",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.size = 0
        self.too_large = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self._receive = receive
        await super().__call__(scope, receive, send)

    async def http_request(self, message: HTTPRequestEvent) -> None:
        limit = (await get_gateway()).settings.max_body_bytes
        chunk = message.get("body", b"")
        self.size += len(chunk)
        declared = header(self.scope, b"content-length")
        if self.size > limit or (
            declared and declared.isascii() and declared.isdigit() and int(declared) > limit
        ):
            self.too_large = True
        elif chunk:
            self.body.append(chunk)
        if message.get("more_body"):
            return
        request_id = new_request_id(self.kind)
        if self.too_large:
            await self.send_error(too_large(limit), request_id)
            raise StopConsumer()
        serve = asyncio.ensure_future(self.serve(b"".join(self.body), request_id))
        watch = asyncio.ensure_future(self._cancel_on_disconnect(serve))
        try:
            await asyncio.wait({serve, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (serve, watch):
                if not task.done():
                    task.cancel()
            for task in (serve, watch):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        raise StopConsumer()

    async def _cancel_on_disconnect(self, serve: asyncio.Future[None]) -> None:
        """Cancels `serve` in the very step that reads the client's `http.disconnect`, so that
        nothing is sent, and billed, after it: left to the `wait` above, two turns of the loop
        later, the relay could still send a chunk that had reached it meanwhile."""
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                serve.cancel()
                return

    async def serve(self, raw: bytes, request_id: str) -> None:
        completion: Completion | None = None
        try:
            refusal = self.method_allowed()
            if refusal:
                raise refusal
            gw = await get_gateway()
            key = await authenticate(gw.keys, bearer(self.scope.get("headers", [])))
            data = parse_json(raw, header(self.scope, b"content-type"))
            req = self.parse(data, key.token_limits(gw.settings))
            headers = self.scope.get("headers", [])
            completion = Completion(gw, key, req, CompletionSink(self), request_id, headers)
            await completion.run()
        except ApiError as exc:
            await self.send_error(exc, request_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request %s failed", request_id)
            if completion is None or not completion.started:
                await self.send_error(internal_error(), request_id)
            else:  # the response has begun: end it as a stream ends, error event and [DONE]
                with contextlib.suppress(Exception):
                    await completion.relay.fail(internal_error())

    def parse(self, data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
        return validate(self.kind, data, limits)


class ChatCompletionsConsumer(CompletionsConsumer):
    kind = "chat"


class TextCompletionsConsumer(CompletionsConsumer):
    kind = "completions"


class EmbeddingsConsumer(CompletionsConsumer):
    """POST /v1/embeddings: queued, gated and billed as a completion is (by its input tokens)."""

    kind = "embeddings"


class RerankConsumer(CompletionsConsumer):
    """POST /v1/rerank (also /rerank and /v2/rerank, vLLM's names): a query against documents,
    queued and billed by its input tokens as embeddings are."""

    kind = "rerank"

    def parse(self, data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
        return validate_rerank(data)


class ScoreConsumer(CompletionsConsumer):
    """POST /v1/score (also /score): pairs of texts, queued and billed as embeddings are."""

    kind = "score"

    def parse(self, data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
        return validate_score(data)


class ResponsesConsumer(CompletionsConsumer):
    """POST /v1/responses (OpenAI's Responses API, as vLLM serves it): through the queue as a
    chat is; its stream's named events relayed as they come."""

    kind = "responses"

    def parse(self, data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
        return validate_responses(data, limits)


class MessagesConsumer(CompletionsConsumer):
    """POST /v1/messages (Anthropic's Messages API, as vLLM serves it), errors in Anthropic's
    shape, so that Anthropic's SDKs and the coding agents built on them read them."""

    kind = "messages"

    def parse(self, data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
        return validate_messages(data, limits)

    async def send_error(self, exc: ApiError, request_id: str | None = None) -> None:
        headers = dict(exc.headers)
        if request_id:
            headers["request-id"] = headers["x-request-id"] = request_id
        await self.send_json(exc.status, anthropic_error(exc), headers)


def model_object(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "llm-server"}


class ModelsConsumer(JsonHttpConsumer):
    """GET /v1/models: the models this key may use."""

    async def handle(self, body: bytes) -> None:
        try:
            port, key = await self.authorized()
        except ApiError as exc:
            await self.send_error(exc)
            return
        models = [model_object(name) for name in sorted(port.routes()) if key.allows_model(name)]
        await self.send_json(200, {"object": "list", "data": models})


class ModelConsumer(JsonHttpConsumer):
    """GET /v1/models/{model}: one model, if it is configured and this key may use it. A model
    the key may not use is answered like one that does not exist, so keys cannot probe names."""

    async def handle(self, body: bytes) -> None:
        name = self.route_arg("model")
        try:
            port, key = await self.authorized()
            if name not in port.routes() or not key.allows_model(name):
                raise model_not_found(name)
        except ApiError as exc:
            await self.send_error(exc)
            return
        await self.send_json(200, model_object(name))


class NotFoundConsumer(JsonHttpConsumer):
    """Any other path under /v1: OpenAI's 404 body instead of Django's HTML page."""

    async def handle(self, body: bytes) -> None:
        await self.send_error(unknown_endpoint(self.scope["method"], self.scope["path"]))


class MetricsConsumer(JsonHttpConsumer):
    """GET /metrics: the gateway's own Prometheus exposition."""

    async def handle(self, body: bytes) -> None:
        gw = await get_gateway()
        refusal = metrics_refusal(gw.settings, self.scope)
        if refusal is not None:
            await self.send_error(refusal)
            return
        await self.send_response(
            200,
            gw.telemetry.render(),
            headers=[(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")],
        )


class HealthConsumer(JsonHttpConsumer):
    """GET /healthz: the process is up."""

    ready_check = False

    async def handle(self, body: bytes) -> None:
        if not self.ready_check:
            await self.send_json(200, {"status": "ok"})
            return
        try:
            gw = await get_gateway()
        except Exception as exc:
            await self.send_json(
                503, {"status": "unavailable", "reason": f"start-up failed: {exc}"}
            )
            return
        if gw.inflight.draining:
            await self.send_json(503, {"status": "draining", "backends": []})
            return
        usable = [b.name for b in gw.snapshot().backends if b.usable]
        scheduler = gw.scheduler_state()
        if scheduler == "redis_unavailable":
            status, word = 503, "scheduler unavailable"
        else:
            status, word = (200, "ready") if usable else (503, "no usable backend")
        await self.send_json(status, {"status": word, "backends": usable, "scheduler": scheduler})


class ReadyConsumer(HealthConsumer):
    """GET /readyz: the gateway started, at least one backend is healthy and fresh, and the
    scheduler can be reached; `scheduler` names its state (see `Gateway.scheduler_state`)."""

    ready_check = True


class ServingConsumer(HealthConsumer):
    """GET /health, as vLLM answers it (`health` in vllm/entrypoints/openai/api_server.py: an empty
    200, 503 once its engine is dead) and load tools expect: an empty 200 while the gateway
    serves; while it drains, the 503 `shutting_down` with Retry-After that new completions get.
    /readyz also asks for a usable backend; this does not, as vLLM's does not ask for a request
    slot."""

    async def handle(self, body: bytes) -> None:
        try:
            gw = await get_gateway()
        except Exception:
            await self.send_error(not_started())
            return
        if gw.inflight.draining:
            await self.send_error(shutting_down())
            return
        await self.send_response(200, b"", headers=[(b"content-length", b"0")])

"""The simulator's raw ASGI application (no Django): OpenAI-compatible endpoints over one engine.

POST /v1/chat/completions and /v1/completions (streamed or not), POST /tokenize, GET /v1/models,
/health and /metrics. While a request is in the engine, a watcher task waits for `http.disconnect` and aborts
the sequence, so a client that goes away frees its batch slot at the engine's next step, as
vLLM does. A chat request with `continue_final_message` continues the final assistant message:
the simulator's output is deterministic per position, so a continued answer is token for token
the answer the request would have had uninterrupted (see `protocol._continued_tokens`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from simulator.engine import Engine, EngineConfig, Sequence
from simulator.exposition import CONTENT_TYPE, build_registry, render
from simulator.kv_events import KvEventPublisher, KvEventsConfig
from simulator.protocol import (
    DONE,
    RequestError,
    ResponseBuilder,
    SimRequest,
    engine_priority,
    parse_request,
    parse_tokenize,
    token_id,
    token_text,
)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class SimulatorApp:
    def __init__(
        self,
        config: EngineConfig | None = None,
        model: str = "demo-llama",
        fmt: str = "vllm",
        default_max_tokens: int = 256,
        legacy_metric_names: bool = False,
        kv_events: KvEventsConfig | None = None,
    ) -> None:
        config = config or EngineConfig()
        self.publisher = KvEventPublisher(kv_events, config.block_tokens) if kv_events else None
        publish = self.publisher.publish if self.publisher is not None else None
        self.engine = Engine(config, on_cache_events=publish, token_id=token_id)
        self.model, self.fmt, self.default_max_tokens = model, fmt, default_max_tokens
        self.registry = build_registry(self.engine, model, fmt, legacy_metric_names)
        self.started = int(time.time())
        self._engine_task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        self._ensure_engine()
        method, path = scope["method"], scope["path"]
        if path in ("/v1/chat/completions", "/v1/completions"):
            if method != "POST":
                await _json(send, 405, {"detail": "Method Not Allowed"})
                return
            await self._generate(receive, send, chat=path == "/v1/chat/completions")
        elif path == "/tokenize" and method == "POST":
            await self._tokenize(receive, send)
        elif method not in ("GET", "HEAD"):
            await _json(send, 405, {"detail": "Method Not Allowed"})
        elif path == "/health":
            await _respond(send, 200, b"", b"application/json")
        elif path == "/metrics":
            await _respond(send, 200, render(self.registry), CONTENT_TYPE.encode())
        elif path == "/v1/models":
            await _json(send, 200, self._models())
        else:
            await _json(send, 404, {"detail": "Not Found"})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._ensure_engine()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _ensure_engine(self) -> None:
        if self._engine_task is None or self._engine_task.done():
            self._engine_task = asyncio.get_running_loop().create_task(self.engine.run())

    async def aclose(self) -> None:
        if self._engine_task is not None:
            self._engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._engine_task
        if self.publisher is not None:
            self.publisher.close()

    def _models(self) -> dict[str, Any]:
        card = {
            "id": self.model,
            "object": "model",
            "created": self.started,
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.engine.config.kv_capacity_tokens,
        }
        return {"object": "list", "data": [card]}

    async def _tokenize(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            tokens = parse_tokenize(body, self.model, self.fmt)
        except RequestError as exc:
            await _json(send, exc.status, exc.body())
            return
        ids = [token_id(t) for t in tokens]
        limit = self.engine.config.kv_capacity_tokens
        payload = {"count": len(ids), "max_model_len": limit, "tokens": ids, "token_strs": None}
        await _json(send, 200, payload)

    async def _generate(self, receive: Receive, send: Send, chat: bool) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req = parse_request(body, chat, self.model, self.default_max_tokens, self.fmt)
            policy = self.engine.config.scheduling_policy
            priority = engine_priority(self.fmt, policy, req.priority)
        except RequestError as exc:
            await _json(send, exc.status, exc.body())
            return
        seq = self.engine.add(Sequence(req.prompt_tokens, req.max_tokens, priority))
        watcher = asyncio.create_task(self._abort_on_disconnect(receive, seq))
        try:
            if req.stream:
                await self._stream(send, req, seq)
            else:
                await self._complete(send, req, seq)
        finally:
            watcher.cancel()
            self.engine.abort(seq)

    async def _abort_on_disconnect(self, receive: Receive, seq: Sequence) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.engine.abort(seq)

    async def _stream(self, send: Send, req: SimRequest, seq: Sequence) -> None:
        out = ResponseBuilder(req, self.model)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        if req.chat:
            await _chunk(send, out.chunk("", first=True))
        while (n := await seq.events.get()) is not None:
            if seq.finished and seq.finish_reason == "abort":
                return
            finish = seq.finish_reason if n == req.max_tokens else None
            await _chunk(send, out.chunk(token_text(req.output_offset + n), finish))
        if seq.finish_reason == "abort":
            return
        if req.include_usage:
            await _chunk(send, out.usage_chunk(seq.generated))
        await send({"type": "http.response.body", "body": DONE, "more_body": False})

    async def _complete(self, send: Send, req: SimRequest, seq: Sequence) -> None:
        while await seq.events.get() is not None:
            pass
        if seq.finish_reason == "abort":
            return
        first = req.output_offset + 1
        text = "".join(token_text(i) for i in range(first, first + seq.generated))
        await _json(
            send,
            200,
            ResponseBuilder(req, self.model).full(
                text, seq.finish_reason or "length", seq.generated
            ),
        )


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
    await _respond(send, status, json.dumps(payload).encode(), b"application/json")

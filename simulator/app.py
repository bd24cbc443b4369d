"""The simulator's raw ASGI application (no Django): vLLM 0.32's OpenAI-compatible server over
one engine.

Generation: POST /v1/chat/completions and /v1/completions (`simulator/protocol.py`),
/v1/responses (`simulator/responses.py`) and /v1/messages (`simulator/messages.py`), streamed
or not. Pooling: POST /v1/embeddings (`simulator/embeddings.py`), /v1/rerank and /v1/score (with
vLLM's other names for them, `simulator/scoring.py`). Always: POST /tokenize, GET
/v1/models, /health and /metrics. Every generation and embedding runs in the engine, so it takes
batch slots and counts in /metrics; while a request is in the engine, a watcher task waits for
`http.disconnect` and aborts its sequences, so a client that goes away frees its slots at the
engine's next step, as vLLM does. A chat request with `continue_final_message` continues the
final assistant message: the simulator's output is deterministic per position, so a continued
answer is token for token the answer the request would have had uninterrupted (see
`protocol._continued_tokens`).

Which endpoints exist follows vLLM's runner. vLLM registers the generation routers only for a
model whose supported tasks include "generate" and the embeddings router only for a pooling
model ("embed" in its tasks: `register_api_routers` in
`vllm/entrypoints/launchers/api_server/routers.py`, `register_pooling_api_routers` in
`vllm/entrypoints/pooling/factories.py`); a route that is not registered is Starlette's 404,
which FastAPI's default handler answers `{"detail": "Not Found"}`. So a vLLM serving a generation
model (`--runner generate`, the default for one) answers POST /v1/embeddings with that 404, and one
serving an embedding model (`--runner pooling`) answers the generation endpoints with it. The
simulator's `runner` does the same for "generate" and "pooling"; its default, "both", serves
every endpoint from one model, which no single vLLM does, so that the gateway's demo can show
embeddings and chat against one simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from simulator import embeddings, messages, responses, scoring
from simulator.engine import Engine, EngineConfig, Sequence
from simulator.exposition import CONTENT_TYPE, build_registry, render
from simulator.kv_events import KvEventPublisher, KvEventsConfig
from simulator.protocol import (
    NATURAL_STOPS,
    RUNNERS,
    ChoiceResult,
    ModelSpec,
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


class Formatter(Protocol):
    """One endpoint's stream and body for a request's finished choices."""

    content_type: bytes

    def start(self) -> list[bytes]: ...
    def delta(self, index: int, text: str, finish: str | None) -> list[bytes]: ...
    def end(self, results: list[ChoiceResult]) -> list[bytes]: ...
    def full(self, results: list[ChoiceResult]) -> dict[str, Any]: ...


class SimulatorApp:
    def __init__(
        self,
        config: EngineConfig | None = None,
        model: str = "demo-llama",
        fmt: str = "vllm",
        legacy_metric_names: bool = False,
        kv_events: KvEventsConfig | None = None,
        runner: str = "both",
        natural_stop: str = "when-unlimited",
        refuse_priority_under_fcfs: bool = False,
        responses_store: bool = False,
    ) -> None:
        if runner not in RUNNERS:
            raise ValueError(f"runner must be one of {RUNNERS}")
        if natural_stop not in NATURAL_STOPS:
            raise ValueError(f"natural_stop must be one of {NATURAL_STOPS}")
        config = config or EngineConfig()
        self.publisher = KvEventPublisher(kv_events, config.block_tokens) if kv_events else None
        publish = self.publisher.publish if self.publisher is not None else None
        self.engine = Engine(config, on_cache_events=publish, token_id=token_id)
        self.model, self.fmt, self.runner = model, fmt, runner
        self.refuse_priority = refuse_priority_under_fcfs
        self.response_store = responses.ResponseStore() if responses_store else None
        blocks = config.block_tokens if config.prefix_cache_blocks else 0
        self.spec = ModelSpec(model, fmt, config.model_len, natural_stop, blocks)
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
        generate = self.runner != "pooling"
        post: dict[str, Callable[[Receive, Send], Awaitable[None]]] = {"/tokenize": self._tokenize}
        if generate:
            post |= {
                "/v1/chat/completions": self._chat,
                "/v1/completions": self._completion,
                "/v1/responses": self._responses,
                "/v1/messages": self._messages,
                "/v1/messages/count_tokens": self._count_tokens,
            }
        if self.runner != "generate":
            post["/v1/embeddings"] = self._embeddings
            # An embedding model serves scoring too (vLLM's names, `pooling/scoring/api_router.py`).
            post |= dict.fromkeys(("/rerank", "/v1/rerank", "/v2/rerank"), self._rerank)
            post |= dict.fromkeys(("/score", "/v1/score"), self._score)
        get = {"/health", "/metrics", "/v1/models"}
        if path in post:
            if method != "POST":
                await _json(send, 405, {"detail": "Method Not Allowed"})
                return
            await post[path](receive, send)
        elif generate and path.startswith("/v1/responses/"):
            await self._stored_response(path, method, send)
        elif path not in get:  # an unregistered route is Starlette's 404, whatever the method
            await _json(send, 404, {"detail": "Not Found"})
        elif method not in ("GET", "HEAD"):
            await _json(send, 405, {"detail": "Method Not Allowed"})
        elif path == "/health":
            await _respond(send, 200, b"", b"application/json")
        elif path == "/metrics":
            await _respond(send, 200, render(self.registry), CONTENT_TYPE.encode())
        else:
            await _json(send, 200, self._models())

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
            "max_model_len": self.spec.max_model_len,
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
        limit = self.spec.max_model_len
        payload = {"count": len(ids), "max_model_len": limit, "tokens": ids, "token_strs": None}
        await _json(send, 200, payload)

    def _priority(self, priority: int) -> int:
        policy = self.engine.config.scheduling_policy
        return engine_priority(self.fmt, policy, priority, self.refuse_priority)

    # Generation endpoints: parse, then run the request's choices through the engine.
    async def _chat(self, receive: Receive, send: Send) -> None:
        await self._openai(receive, send, chat=True)

    async def _completion(self, receive: Receive, send: Send) -> None:
        await self._openai(receive, send, chat=False)

    async def _openai(self, receive: Receive, send: Send, chat: bool) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req = parse_request(body, chat, self.spec)
            priority = self._priority(req.priority)
        except RequestError as exc:
            await _json(send, exc.status, exc.body())
            return
        await self._generate(receive, send, req, priority, ResponseBuilder(req, self.model))

    async def _responses(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req, out = responses.parse(body, self.spec, self.response_store)
            priority = self._priority(req.priority)
        except RequestError as exc:
            await _json(send, exc.status, exc.body())
            return
        await self._generate(receive, send, req, priority, out)

    async def _stored_response(self, path: str, method: str, send: Send) -> None:
        """GET /v1/responses/{id} and POST /v1/responses/{id}/cancel: vLLM stores no response
        unless `VLLM_ENABLE_RESPONSES_API_STORE` is set, so every id is unknown; with the store
        on, GET returns a stored one (a cancel has nothing left to cancel: not modelled)."""
        rest = path.removeprefix("/v1/responses/")
        cancel = rest.endswith("/cancel")
        response_id = rest.removesuffix("/cancel")
        if not response_id or "/" in response_id or method != ("POST" if cancel else "GET"):
            status = 404 if not response_id or "/" in response_id else 405
            detail = "Not Found" if status == 404 else "Method Not Allowed"
            await _json(send, status, {"detail": detail})
            return
        store = self.response_store
        if store is not None and not cancel and response_id in store.responses:
            await _json(send, 200, store.responses[response_id])
            return
        exc = responses.not_found(response_id)
        await _json(send, exc.status, exc.body())

    async def _messages(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req, out = messages.parse(body, self.spec)
            priority = self._priority(req.priority)
        except RequestError as exc:
            await _json(send, exc.status, messages.error_body(exc))
            return
        await self._generate(receive, send, req, priority, out)

    async def _count_tokens(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            payload = messages.count_tokens(body, self.spec)
        except RequestError as exc:
            await _json(send, exc.status, messages.error_body(exc))
            return
        await _json(send, 200, payload)

    async def _generate(
        self, receive: Receive, send: Send, req: SimRequest, priority: int, out: Formatter
    ) -> None:
        seqs = [
            self.engine.add(Sequence(list(req.prompt_tokens), req.max_tokens, priority, stop_at=s))
            for s in req.stop_at
        ]
        watcher = asyncio.create_task(self._abort_on_disconnect(receive, seqs))
        try:
            if req.stream:
                await self._stream(send, req, seqs, out)
            else:
                await self._complete(send, req, seqs, out)
        finally:
            watcher.cancel()
            for seq in seqs:
                self.engine.abort(seq)

    async def _abort_on_disconnect(self, receive: Receive, seqs: list[Sequence]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        for seq in seqs:
            self.engine.abort(seq)

    async def _stream(
        self, send: Send, req: SimRequest, seqs: list[Sequence], out: Formatter
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", out.content_type), (b"cache-control", b"no-cache")],
            }
        )
        # The headers go now, as vLLM's server sends a StreamingResponse's (daphne would hold
        # them until the first body bytes).
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        # The opening (a chat's role chunks) goes with the engine's first output, after the
        # prefill, not on arrival: vLLM sends it on the first RequestOutput
        # (`chat_completion_stream_generator`, vllm/entrypoints/openai/chat_completion/
        # serving.py), so a request queued in the engine sends headers and then nothing
        # (tests/vllm/test_vllm_load.py::
        # test_a_stream_queued_in_the_engine_has_its_headers_and_no_event_until_it_runs).
        opening = out.start()
        async for index, n in _tokens(seqs):
            seq = seqs[index]
            if seq.finish_reason == "abort":
                return
            for data in opening:
                await _chunk(send, data)
            opening = []
            finish = seq.finish_reason if seq.finished and n == seq.generated else None
            for data in out.delta(index, token_text(req.output_offset + n, index), finish):
                await _chunk(send, data)
        if any(seq.finish_reason == "abort" for seq in seqs):
            return
        for data in [*opening, *out.end(_results(req, seqs))]:
            await _chunk(send, data)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _complete(
        self, send: Send, req: SimRequest, seqs: list[Sequence], out: Formatter
    ) -> None:
        async for _ in _tokens(seqs):
            pass
        if any(seq.finish_reason == "abort" for seq in seqs):
            return
        await _json(send, 200, out.full(_results(req, seqs)))

    async def _embeddings(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req = embeddings.parse(body, self.spec)
            priority = self._priority(req.priority)
        except RequestError as exc:
            await _json(send, exc.status, exc.body())
            return
        if await self._pool(receive, req.prompts, priority):
            content_type, headers, payload = embeddings.respond(req, self.model)
            await _respond(send, 200, payload, content_type, headers)

    async def _rerank(self, receive: Receive, send: Send) -> None:
        await self._scoring(receive, send, rerank=True)

    async def _score(self, receive: Receive, send: Send) -> None:
        await self._scoring(receive, send, rerank=False)

    async def _scoring(self, receive: Receive, send: Send, rerank: bool) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req = scoring.parse(body, self.spec, rerank)
            priority = self._priority(req.priority)
        except RequestError as exc:
            await _json(send, exc.status, exc.body())
            return
        if await self._pool(receive, scoring.prompts(req), priority):
            await _json(send, 200, scoring.respond(req, self.model))

    async def _pool(self, receive: Receive, prompts: list[list[str]], priority: int) -> bool:
        """Each prompt a pooling request in the engine (a prefill step, nothing generated);
        False if the client left first (they are aborted)."""
        seqs = [self.engine.add(Sequence(list(p), 1, priority, pooling=True)) for p in prompts]
        watcher = asyncio.create_task(self._abort_on_disconnect(receive, seqs))
        try:
            async for _ in _tokens(seqs):
                pass
            return not any(seq.finish_reason == "abort" for seq in seqs)
        finally:
            watcher.cancel()
            for seq in seqs:
                self.engine.abort(seq)


async def _tokens(seqs: list[Sequence]) -> AsyncIterator[tuple[int, int]]:
    """(choice, running token count) as the engine emits them, all choices merged, until every
    sequence has finished."""
    merged: asyncio.Queue[tuple[int, int | None]] = asyncio.Queue()

    async def forward(index: int, seq: Sequence) -> None:
        while True:
            n = await seq.events.get()
            merged.put_nowait((index, n))
            if n is None:
                return

    tasks = [asyncio.create_task(forward(i, s)) for i, s in enumerate(seqs)]
    try:
        open_ = len(seqs)
        while open_:
            index, n = await merged.get()
            if n is None:
                open_ -= 1
            else:
                yield index, n
    finally:
        for task in tasks:
            task.cancel()


def _results(req: SimRequest, seqs: list[Sequence]) -> list[ChoiceResult]:
    first = req.output_offset + 1
    return [
        ChoiceResult(
            index=i,
            text="".join(token_text(t, i) for t in range(first, first + seq.generated)),
            tokens=seq.generated,
            finish_reason=seq.finish_reason or "length",
            cached_tokens=seq.cached_tokens,
        )
        for i, seq in enumerate(seqs)
    ]


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


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
    await _respond(send, status, json.dumps(payload).encode(), b"application/json")

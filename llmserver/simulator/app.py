"""The simulator's OpenAI-compatible HTTP surface, as a raw ASGI application.

POST /v1/chat/completions and /v1/completions (streaming or not, with `stream_options`),
GET /v1/models, /health and /metrics. Errors have vLLM's shape: OpenAI's, with an integer code.
A client that disconnects mid-stream aborts its sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

from llmserver.simulator.engine import Engine, EngineConfig, Sequence
from llmserver.simulator.exposition import Exposition

WORDS = ("the", "model", "says", "hello", "to", "every", "user", "in", "turn", "and", "fairly")
Send = Any
Receive = Any


def count_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _error(status: int, message: str, type_: str = "BadRequestError") -> tuple[int, bytes]:
    return status, json.dumps(
        {"error": {"message": message, "type": type_, "param": None, "code": status}}
    ).encode()


class SimulatorApp:
    def __init__(self, config: EngineConfig, model: str = "demo-llama", fmt: str = "vllm") -> None:
        self.model = model
        self.engine = Engine(config)
        self.exposition = Exposition(self.engine, fmt, model)
        self.engine.on_token = self.exposition.on_token
        self.engine.on_finish = self.exposition.on_finish
        self._task: asyncio.Task[None] | None = None

    def _ensure_engine(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.engine.run())

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        if scope["type"] != "http":
            return
        self._ensure_engine()
        path, method = scope["path"], scope["method"]
        if path == "/health":
            await self._respond(send, 200, b"", "text/plain")
        elif path == "/metrics":
            await self._respond(
                send, 200, self.exposition.render(), "text/plain; version=0.0.4; charset=utf-8"
            )
        elif path == "/v1/models":
            data = {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "simulator"}],
            }
            await self._respond(send, 200, json.dumps(data).encode())
        elif path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
            await self._completion(scope, receive, send, chat=path.endswith("chat/completions"))
        else:
            await self._respond(send, *_error(404, f"Not found: {method} {path}", "NotFoundError"))

    async def _respond(
        self, send: Send, status: int, body: bytes, content_type: str = "application/json"
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type.encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _read(self, receive: Receive) -> bytes | None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if not message.get("more_body"):
                return body

    def _parse(self, raw: bytes, chat: bool) -> tuple[dict[str, Any], str] | tuple[int, bytes]:
        try:
            data = json.loads(raw)
            assert isinstance(data, dict)
        except (ValueError, AssertionError):
            return _error(400, "The body is not a JSON object.")
        if data.get("model") != self.model:
            return _error(404, f"The model `{data.get('model')}` does not exist.", "NotFoundError")
        if chat:
            messages = data.get("messages")
            if not isinstance(messages, list) or not messages:
                return _error(400, "messages must be a non-empty list")
            text = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            prompt = data.get("prompt")
            text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        max_tokens = data.get("max_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "max_tokens must be a positive integer")
        return data, text

    async def _completion(
        self, scope: dict[str, Any], receive: Receive, send: Send, chat: bool
    ) -> None:
        raw = await self._read(receive)
        if raw is None:
            return
        parsed = self._parse(raw, chat)
        if isinstance(parsed[0], int):
            await self._respond(send, parsed[0], parsed[1])  # type: ignore[arg-type]
            return
        data, text = parsed  # type: ignore[misc]
        priority = data.get("priority", 0)
        seq = Sequence(
            prompt=text,
            prompt_tokens=count_tokens(text),
            max_tokens=data.get("max_tokens") or 16,
            priority=priority if isinstance(priority, int) else 0,
        )
        self.engine.add(seq)
        stream = bool(data.get("stream"))
        include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
        watcher = asyncio.ensure_future(self._watch_disconnect(receive))
        try:
            if stream:
                await self._stream(send, seq, chat, include_usage, watcher)
            else:
                await self._whole(send, seq, chat, watcher)
        finally:
            watcher.cancel()
            if not seq.finished:
                self.engine.abort(seq)

    async def _watch_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _next_token(self, seq: Sequence, watcher: asyncio.Future[None]) -> int | None:
        """The next token, or None at the end; raises CancelledError if the client left."""
        getter = asyncio.ensure_future(seq.tokens.get())
        await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            raise asyncio.CancelledError
        return getter.result()

    def _usage(self, seq: Sequence) -> dict[str, Any]:
        return {
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.generated,
            "total_tokens": seq.prompt_tokens + seq.generated,
            "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
        }

    async def _stream(
        self,
        send: Send,
        seq: Sequence,
        chat: bool,
        include_usage: bool,
        watcher: asyncio.Future[None],
    ) -> None:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
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
        with contextlib.suppress(asyncio.CancelledError):
            while (token := await self._next_token(seq, watcher)) is not None:
                word = WORDS[token % len(WORDS)] + " "
                last = token >= seq.max_tokens
                finish = "length" if last else None
                if chat:
                    delta: dict[str, Any] = {"content": word}
                    if token == 1:
                        delta["role"] = "assistant"
                    choice: dict[str, Any] = {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                else:
                    choice = {"index": 0, "text": word, "logprobs": None, "finish_reason": finish}
                chunk = {
                    "id": rid,
                    "object": kind,
                    "created": created,
                    "model": self.model,
                    "choices": [choice],
                }
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + json.dumps(chunk).encode() + b"\n\n",
                        "more_body": True,
                    }
                )
            if include_usage:
                usage = {
                    "id": rid,
                    "object": kind,
                    "created": created,
                    "model": self.model,
                    "choices": [],
                    "usage": self._usage(seq),
                }
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + json.dumps(usage).encode() + b"\n\n",
                        "more_body": True,
                    }
                )
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    async def _whole(
        self, send: Send, seq: Sequence, chat: bool, watcher: asyncio.Future[None]
    ) -> None:
        words = []
        try:
            while (token := await self._next_token(seq, watcher)) is not None:
                words.append(WORDS[token % len(WORDS)])
        except asyncio.CancelledError:
            return
        text = " ".join(words)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            obj, prefix = "chat.completion", "chatcmpl-"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
            obj, prefix = "text_completion", "cmpl-"
        body = {
            "id": prefix + uuid.uuid4().hex,
            "object": obj,
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": self._usage(seq),
        }
        await self._respond(send, 200, json.dumps(body).encode())

"""Relay: one backend answer to the client, without buffering, counting what was delivered.

Streams are relayed event by event: the usage chunk a client did not ask for is dropped, the
backend's model name is replaced by the public one, the backend's response id by the gateway's
request id (so the body, `X-Request-Id`, the usage row and the logs name one id), and every event that carries generated text
is counted once the sink's send of it has returned, so a stream cut by anyone is billed for
what really reached the client (a send cancelled while a server held it back is not). The
backend's own usage, where it sends one, replaces the counts.

A preemptible job's relay races each wait for an upstream chunk against the scheduler's
eviction: before the first token it just stops (the job restarts from its queue); after, where
the backend can continue a message (`llmserver.pipeline.resume`), it stops and the next
`forward` continues the same client stream, with one id and one usage (the original prompt,
every token delivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from llmserver.backends.upstream import BackendError, UpstreamClient
from llmserver.pipeline.resume import (
    Delivered,
    Preempted,
    continuation_body,
    original_prompt_tokens,
)
from llmserver.wire.errors import ApiError, anthropic_error
from llmserver.wire.sse import DONE, EventSplitter, is_usage_only, usage_of
from llmserver.wire.validation import CompletionRequest
from tenants.endpoints import Endpoint

T = TypeVar("T")
PATHS = {
    Endpoint.CHAT: "/v1/chat/completions",
    Endpoint.COMPLETIONS: "/v1/completions",
    Endpoint.EMBEDDINGS: "/v1/embeddings",
    Endpoint.RESPONSES: "/v1/responses",
    Endpoint.MESSAGES: "/v1/messages",
    # vLLM serves these under /rerank and /score too (`pooling/scoring/api_router.py`; it logs
    # a warning for each /v1/score); the /v1 forms are the ones other servers share.
    Endpoint.RERANK: "/v1/rerank",
    Endpoint.SCORE: "/v1/score",
}


@dataclass(frozen=True, slots=True)
class NamedEvents:
    """A stream whose events are named (`event:` lines) and that ends with its last named
    event, not `[DONE]`: the Responses API's and Anthropic's Messages API's, as vLLM serves
    them (`vllm/entrypoints/openai/responses/api_router.py`, `vllm/entrypoints/anthropic/
    serving.py`). `text`: events that carry generated text; `usage`: events with the answer's
    token counts (parsed, the others never); `prompt_usage`: events with the prompt's count only
    (Anthropic's `message_start` says `output_tokens: 0` before any text: taken as the answer's
    count, a stream cut after it would bill nothing of what was delivered); `end`: the events
    that finish the answer."""

    text: frozenset[bytes]
    usage: frozenset[bytes]
    end: frozenset[bytes]
    prompt_usage: frozenset[bytes] = frozenset()


_RESPONSE_ENDS = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})
NAMED_EVENTS = {
    Endpoint.RESPONSES: NamedEvents(
        text=frozenset({b"response.output_text.delta"}), usage=_RESPONSE_ENDS, end=_RESPONSE_ENDS
    ),
    Endpoint.MESSAGES: NamedEvents(
        text=frozenset({b"content_block_delta"}),
        usage=frozenset({b"message_delta"}),
        end=frozenset({b"message_stop"}),
        prompt_usage=frozenset({b"message_start"}),
    ),
}


def usage_in(name: bytes, payload: bytes) -> object:
    """The usage object of a named event: the response's (Responses), the message's
    (`message_start`) or the event's own (`message_delta`)."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    inner = data.get("response") or data.get("message") or data
    return inner.get("usage") if isinstance(inner, dict) else None


# An event with generated text: a chat delta's or a completion's non-empty "content"/"text".
_HAS_TEXT = re.compile(rb'"(?:content|text)": ?"[^"]')
# An event that ends its choice: a finish reason that is not null.
_FINISHED = re.compile(rb'"finish_reason": ?"')


class Sink(Protocol):
    """Where a completion goes: an HTTP response or a WebSocket. `needs_start` says whether it
    must `start()` (send headers) before it can tell the client anything, such as `queued`;
    `embeds_events` whether it writes each event inside JSON of its own (a WebSocket's frame),
    which one malformed event would break: each is then parsed before it goes out."""

    needs_start: bool
    embeds_events: bool

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None: ...
    async def queued(self, request_id: str, position: int, eta_s: float) -> None: ...
    async def dispatched(self, queue_time_ms: str) -> None: ...
    async def event(self, payload: bytes, name: bytes | None = None) -> None: ...
    async def body(self, payload: bytes) -> None: ...
    async def finish(self) -> None: ...


class Evictable(Protocol):
    """What the relay asks of the scheduler's ticket while it streams (`scheduling.Ticket`)."""

    @property
    def evict_requested(self) -> bool: ...
    async def eviction(self) -> None: ...
    def decline_eviction(self) -> None: ...


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
        # Resuming after a preemption: the text delivered, the tokens delivered before the
        # current upstream request, and the original prompt's size (the continuation's is more).
        self.delivered: Delivered | None = None
        self._resumed = False
        self._leg_base = 0
        self._original_prompt: int | None = None
        self._skip_role = False
        self._ending = False  # the finish reason or the usage has arrived: nothing to continue
        # The `service_tier` to name in each response object, where the client named one.
        self.service_tier: str | None = None
        # Sent with the current upstream request besides the client's own (the trace context).
        self._upstream_headers: Mapping[str, str] | None = None
        # Given a Responses request's final response object (its id the gateway's) before the
        # client has its end, so the id is kept before the client can name it again.
        self.keep: Callable[[dict[str, Any]], Awaitable[None]] | None = None

    @property
    def completion_tokens(self) -> int:
        """The backend's count where it sent one, else the text events delivered."""
        if self.reported_completion is not None:
            return self.reported_completion
        return self.text_events

    @property
    def resuming(self) -> bool:
        """The upstream request is a continuation of a paused stream."""
        return self._resumed

    async def forward(
        self,
        client: UpstreamClient,
        upstream_model: str,
        priority: int,
        evict: Evictable | None = None,
        can_resume: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """One upstream request, with `headers` (the trace context) besides the client's own.
        With `evict`, raises Preempted when the scheduler asks for the slot and the job can give
        it up: before its first token, or (`can_resume`) as a chat stream that the next
        `forward` continues."""
        self._upstream_headers = headers
        body = upstream_body(self.req, upstream_model, client.profile.max_completion_tokens)
        path = PATHS[self.req.kind]
        self._id_rename = None
        if self.started:
            body = await self._resumption(client, body, upstream_model)
        elif (
            evict is not None and can_resume and self.req.stream and self.req.kind == Endpoint.CHAT
        ):
            self.delivered = Delivered()
        if self.req.stream:
            await self._stream(client, path, body, priority, upstream_model, evict, can_resume)
        else:
            await self._whole(client, path, body, priority, evict)

    async def _resumption(
        self, client: UpstreamClient, body: dict[str, Any], upstream_model: str
    ) -> dict[str, Any]:
        """The request that continues what the client has (its role chunk is not repeated)."""
        self._resumed, self._skip_role = True, True
        text = self.delivered.text if self.delivered is not None else ""
        if not text:
            return body
        if self._original_prompt is None:
            self._original_prompt = await original_prompt_tokens(
                client, self.req.body, upstream_model, self.request_id
            )
        return continuation_body(body, text, self._leg_base)

    def _may_stop(self, can_resume: bool) -> bool:
        """Whether this job can give up its slot now without harm to its client."""
        if not self.started:
            return True
        return can_resume and self.delivered is not None and self.delivered.resumable

    async def _whole(
        self,
        client: UpstreamClient,
        path: str,
        body: dict[str, Any],
        priority: int,
        evict: Evictable | None,
    ) -> None:
        headers = self._upstream_headers
        call = client.complete(
            path, body, priority=priority, request_id=self.request_id, headers=headers
        )
        if evict is None:
            _status, data = await call
        else:
            _status, data = await _unless_evicted(call, evict)
        self._take_usage(data.get("usage"))
        if "model" in data:
            data["model"] = self.req.model
        if "id" in data and self.req.kind not in NAMED_EVENTS:
            data["id"] = self.request_id
        if self.req.kind == Endpoint.RESPONSES:
            data["id"] = self.request_id  # the gateway's, which `previous_response_id` names
            if "previous_response_id" in data:  # the engine was sent the conversation instead
                data["previous_response_id"] = self.req.previous_response_id
        if self.service_tier is not None:
            data["service_tier"] = self.service_tier
        if self.keep is not None:
            await self.keep(data)
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
        evict: Evictable | None,
        can_resume: bool,
    ) -> None:
        """A stream, event by event. A named-event stream (Responses, Messages) is never
        continued after a pause (nothing continues such an answer): once begun, it declines an
        eviction; it ends with its last named event, not `[DONE]`."""
        named = NAMED_EVENTS.get(self.req.kind)
        can_resume = can_resume and named is None
        rename = self._model_rename(upstream_model)
        splitter = EventSplitter()
        headers = self._upstream_headers
        upstream = client.stream_chat(
            path, body, priority=priority, request_id=self.request_id, headers=headers
        )
        async with (
            contextlib.aclosing(upstream) as chunks,
            contextlib.aclosing(self._chunks_until_evicted(chunks, evict, can_resume)) as flow,
        ):
            async for chunk in flow:
                for name, payload in splitter.feed(chunk):
                    if named is None:
                        await self._relay_event(payload, rename)
                    else:
                        await self._relay_named(name or b"", payload, rename, named)
                if evict is not None and evict.evict_requested and not self._ending:
                    if not self._may_stop(can_resume):
                        evict.decline_eviction()
                        continue
                    raise self._preempted()
        if not self.started:
            raise BackendError(
                "The backend closed the stream without sending anything.", retryable=True
            )
        if not self._ending:
            # vLLM, SGLang, TGI and llama.cpp all end a stream with a finish reason (a named
            # stream with its final event): one that stops before it was cut, whatever its
            # [DONE] says.
            if named is not None:
                raise BackendError("The backend ended the stream before its final event.", False)
            raise BackendError("The backend ended the stream without a finish reason.", False)
        if named is None:
            await self.sink.event(DONE)
        await self.sink.finish()

    async def _chunks_until_evicted(
        self, chunks: AsyncIterator[bytes], evict: Evictable | None, can_resume: bool
    ) -> AsyncGenerator[bytes]:
        """`chunks`, each wait for the next one raced against the eviction. Looked at only
        between chunks, an eviction would wait for the victim's next token before its abort
        left for the engine. A request queued in the engine sends nothing until it runs (vLLM's
        first event comes with its first output: `chat_completion_stream_generator`), so there
        the race is what lets the eviction happen at all, rather than hold the backend's one
        eviction at a time. The race stops only a wait for the upstream, never a send to the
        client, so nothing is half sent; a token the engine had sent as the eviction came is
        not delivered, and the continuation asks for it again."""
        if evict is None:
            async for chunk in chunks:
                yield chunk
            return
        relay = asyncio.current_task()
        assert relay is not None
        reading = stopping = False

        def stop(_: object) -> None:
            nonlocal stopping
            if reading and not self._ending and self._may_stop(can_resume):
                stopping = True
                relay.cancel()

        watch = asyncio.ensure_future(evict.eviction())
        watch.add_done_callback(stop)
        try:
            while True:
                reading = True
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if stopping and relay.uncancel() == 0:
                        raise self._preempted() from None
                    raise
                finally:
                    reading = False
                yield chunk
        finally:
            watch.remove_done_callback(stop)
            watch.cancel()

    def _preempted(self) -> Preempted:
        """Stop this leg for the scheduler: the next `forward` continues from what was sent."""
        self._leg_base = self.completion_tokens
        self.reported_completion = None
        return Preempted()

    def _model_rename(self, upstream_model: str) -> tuple[bytes, bytes] | None:
        """The backend's model name to the public one, in every event (None: they are one)."""
        if upstream_model == self.req.model:
            return None
        return (json.dumps(upstream_model).encode(), json.dumps(self.req.model).encode())

    async def _relay_named(
        self,
        name: bytes,
        payload: bytes,
        rename: tuple[bytes, bytes] | None,
        named: NamedEvents,
    ) -> None:
        self._check_object(payload)
        if name in named.usage:
            self._take_usage(usage_in(name, payload))
        elif name in named.prompt_usage:
            usage = usage_in(name, payload)
            if isinstance(usage, dict):
                self._take_usage({"input_tokens": usage.get("input_tokens")})
        if name in named.end:
            self._ending = True
        if rename is not None:
            payload = _rename_field(payload, b"model", rename)
        if self.req.kind == Endpoint.RESPONSES:
            payload = self._own_response_id(payload)
            if name in named.end and self.keep is not None:
                await self.keep(_response_of(payload))
        if not self.started:
            await self._start(stream=True)
        await self.sink.event(payload, name or None)
        if name in named.text:
            self.text_events += 1  # delivered: counted once its send has returned

    def _own_response_id(self, payload: bytes) -> bytes:
        """The response's id as the gateway made it, in every event that names it: read from
        the first event's response (`response.created`), then replaced by bytes as chunk ids
        are; and the `previous_response_id` the client named (the engine was sent none)."""
        if self._id_rename is None:
            self._id_rename = (b"", b"")
            upstream = _response_of(payload).get("id")
            if isinstance(upstream, str) and upstream != self.request_id:
                self._id_rename = (
                    json.dumps(upstream).encode(),
                    json.dumps(self.request_id).encode(),
                )
        payload = _rename_field(payload, b"id", self._id_rename)
        if self.req.previous_response_id is not None:  # the engine was sent the conversation
            chained = (b"null", json.dumps(self.req.previous_response_id).encode())
            payload = _rename_field(payload, b"previous_response_id", chained)
        return payload

    def _check_object(self, payload: bytes) -> None:
        """Checked by its ends, not parsed, on its way to an SSE stream (the hot path, which
        relays each chunk as it came): garbage, a truncated object or an HTML page are not passed
        on. Parsed whole for a sink that embeds it (`embeds_events`): `{x}` there would make
        the client's frame itself unreadable."""
        body = payload.strip()
        whole = body[:1] == b"{" and body[-1:] == b"}"
        if whole and (not self.sink.embeds_events or _parses(body)):
            return
        message = "The backend sent an event that is not a JSON object."
        raise BackendError(message, retryable=not self.started)

    async def _relay_event(self, payload: bytes, rename: tuple[bytes, bytes] | None) -> None:
        if payload == DONE:
            return
        self._check_object(payload)
        usage = usage_of(payload)
        if usage is not None or _FINISHED.search(payload):
            self._ending = True
        if usage is not None:
            self._take_usage(usage)
            if not self.req.include_usage and is_usage_only(payload):
                return
            if self._resumed:
                payload = self._with_whole_usage(payload)
        has_text = _HAS_TEXT.search(payload) is not None
        if self._skip_role:
            self._skip_role = False
            if not has_text and usage is None:
                return  # the continuation's role chunk: the client has had one
        upstream_payload = payload
        if rename is not None:
            payload = _rename_field(payload, b"model", rename)
        payload = _rename_field(payload, b"id", self._id_rename or self._learn_id(payload))
        if self.service_tier is not None and len(payload.strip()) > 2:
            # Named first in the object: the chunk is never parsed for it.
            tier = b'{"service_tier":"' + self.service_tier.encode() + b'",'
            payload = tier + payload.strip()[1:]
        if not self.started:
            await self._start(stream=True)
        await self.sink.event(payload)
        if has_text:  # delivered: counted once its send has returned
            self.text_events += 1
            if self.delivered is not None:
                self.delivered.add(upstream_payload)

    async def _start(self, stream: bool) -> None:
        headers = self._on_start()
        if not self.opened:
            await self.sink.start(200, headers, stream=stream)
            self.opened = True
        else:  # the headers went out while it was queued, without the queue time
            await self.sink.dispatched(headers["x-queue-time-ms"])
        self.started = True

    async def report_queued(self, position: int, eta_s: float) -> None:
        """Tell a waiting client where it stands; a stream's headers go out first (without
        X-Queue-Time-Ms, not known yet: a `: dispatched queue_time_ms=` comment follows)."""
        if self.sink.needs_start and not self.opened:
            await self.sink.start(200, {"x-request-id": self.request_id}, stream=True)
            self.opened = True
        await self.sink.queued(self.request_id, position, eta_s)

    async def fail(self, exc: ApiError) -> None:
        """After the first byte an error can only be one more event, then the end (a named
        stream's `error` event in its API's shape, and no `[DONE]`)."""
        if self.req.kind == Endpoint.MESSAGES:
            await self.sink.event(json.dumps(anthropic_error(exc)).encode(), b"error")
        elif self.req.kind == Endpoint.RESPONSES:
            event = {"type": "error", "code": exc.code, "message": exc.message, "param": exc.param}
            await self.sink.event(json.dumps(event).encode(), b"error")
        else:
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
        """OpenAI's names, or the Responses and Anthropic APIs' (input and output tokens)."""
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(prompt, int):
            self.reported_prompt = prompt
            if self._resumed:
                # The continuation's prompt holds the delivered text too: the client's prompt is
                # the original one (counted by the backend, else less what was delivered).
                self.reported_prompt = self._original_prompt or max(0, prompt - self._leg_base)
        if isinstance(completion, int):
            self.reported_completion = completion + (self._leg_base if self._resumed else 0)

    def _with_whole_usage(self, payload: bytes) -> bytes:
        """A resumed stream's usage chunk, restated for the whole request."""
        try:
            data = json.loads(payload)
        except ValueError:
            return payload
        prompt, completion = self.reported_prompt or 0, self.completion_tokens
        data["usage"] = {
            **data["usage"],
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        return json.dumps(data, separators=(",", ":")).encode()


async def _unless_evicted(call: Awaitable[T], evict: Evictable) -> T:
    """`call`'s result, or Preempted (and `call` cancelled) if the eviction comes first; a
    non-streamed answer has sent its client nothing, so it can always start again."""
    work = asyncio.ensure_future(call)
    evicted = asyncio.ensure_future(evict.eviction())
    try:
        await asyncio.wait((work, evicted), return_when=asyncio.FIRST_COMPLETED)
    finally:
        evicted.cancel()
        if not work.done():
            work.cancel()
            # Its clean-up (the upstream request closed) is over before anything goes on.
            await asyncio.wait((work,))
    if work.cancelled():
        raise Preempted()
    return work.result()


def _rename_field(payload: bytes, name: bytes, rename: tuple[bytes, bytes]) -> bytes:
    """`"name": old` becomes `"name": new`, with or without the space after the colon; only
    that field's value, so a tool call's own "id" or a text that mentions the model stays."""
    old, new = rename
    if not old:
        return payload
    key = b'"' + name + b'":'
    payload = payload.replace(key + old, key + new)
    return payload.replace(key + b" " + old, key + b" " + new)


def upstream_body(
    req: CompletionRequest, upstream_model: str, reads_max_completion_tokens: bool = True
) -> dict[str, Any]:
    body = dict(req.body)
    body["model"] = upstream_model
    if not reads_max_completion_tokens and "max_completion_tokens" in body:
        body["max_tokens"] = body.pop("max_completion_tokens")
    if req.stream and req.kind in (Endpoint.CHAT, Endpoint.COMPLETIONS):
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def _response_of(payload: bytes) -> dict[str, Any]:
    """The response object a Responses event carries, or {}."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return {}
    response = data.get("response") if isinstance(data, dict) else None
    return response if isinstance(response, dict) else {}


def _parses(body: bytes) -> bool:
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True

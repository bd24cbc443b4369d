"""The relay gives up its slot only where that harms nobody: never once the answer has ended
(its finish reason or usage has arrived), since a continuation would then ask for more, and never
once a Responses or Messages stream has begun, since nothing continues such an answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from llmserver.pipeline.relay import Relay
from llmserver.pipeline.resume import Preempted
from llmserver.wire.validation import CompletionRequest
from tenants.backend_kinds import profile
from tenants.endpoints import Endpoint


class Evicted:
    """A ticket whose eviction was asked for from the start."""

    declined = 0
    evict_requested = True

    async def eviction(self) -> None:
        return None

    def decline_eviction(self) -> None:
        self.declined += 1


class EvictedLater(Evicted):
    """A ticket whose eviction is asked for once `asked` is set."""

    evict_requested = False

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def eviction(self) -> None:
        await self.asked.wait()


class Sink:
    needs_start = True
    embeds_events = False

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.names: list[bytes | None] = []

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None:
        return None

    async def queued(self, request_id: str, position: int, eta_s: float) -> None:
        return None

    async def event(self, payload: bytes, name: bytes | None = None) -> None:
        self.events.append(payload)
        self.names.append(name)

    async def body(self, payload: bytes) -> None:
        return None

    async def finish(self) -> None:
        return None


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class Upstream:
    """The last chunk of an answer: its final token with a finish reason, then the usage."""

    kind = "vllm"
    profile = profile("vllm")

    async def stream_chat(
        self, path: str, body: dict[str, Any], **kw: Any
    ) -> AsyncGenerator[bytes]:
        delta = {"content": " end"}
        yield sse(
            {"id": "u1", "choices": [{"index": 0, "delta": delta, "finish_reason": "length"}]}
        )
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        yield sse({"id": "u1", "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"


def request(kind: Endpoint = Endpoint.CHAT) -> CompletionRequest:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return CompletionRequest(
        kind=kind,
        model="m",
        stream=True,
        include_usage=False,
        max_tokens=1,
        prompt_chars=2,
        prefix_blocks=(),
        wants_flex=False,
        body=body,
    )


async def test_an_answer_that_has_ended_is_not_paused():
    sink, ticket = Sink(), Evicted()
    relay = Relay(sink, request(), dict, "chatcmpl-1")
    await relay.forward(Upstream(), "m", 0, ticket, can_resume=True)  # type: ignore[arg-type]
    assert relay.completion_tokens == 1 and sink.events[-1] == b"[DONE]"


async def test_a_stream_before_its_first_token_gives_up_its_slot():
    class Silent(Upstream):
        async def stream_chat(self, path: str, body: dict[str, Any], **kw: Any):
            yield b": keep-alive\n\n"

    relay = Relay(Sink(), request(), dict, "chatcmpl-2")
    with pytest.raises(Preempted):
        await relay.forward(Silent(), "m", 0, Evicted(), can_resume=False)  # type: ignore[arg-type]


def named(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\n".encode() + sse(data)


# Each a whole answer of two tokens: the events vLLM sends, cut to the fields the relay reads
# (the simulator's simulator/responses.py and messages.py send them whole).
NAMED_STREAMS = {
    Endpoint.RESPONSES: [
        named("response.created", {"type": "response.created", "response": {"id": "resp_1"}}),
        named("response.output_text.delta", {"type": "response.output_text.delta", "delta": "a"}),
        named("response.output_text.delta", {"type": "response.output_text.delta", "delta": "b"}),
        named(
            "response.completed",
            {
                "type": "response.completed",
                "response": {"id": "resp_1", "usage": {"input_tokens": 3, "output_tokens": 2}},
            },
        ),
    ],
    Endpoint.MESSAGES: [
        named(
            "message_start",
            {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}},
        ),
        named("content_block_delta", {"type": "content_block_delta", "delta": {"text": "a"}}),
        named("content_block_delta", {"type": "content_block_delta", "delta": {"text": "b"}}),
        named("message_delta", {"type": "message_delta", "usage": {"output_tokens": 2}}),
        named("message_stop", {"type": "message_stop"}),
    ],
}


@pytest.mark.parametrize("kind", list(NAMED_STREAMS))
async def test_a_begun_named_event_stream_declines_the_eviction_and_ends_whole(kind):
    class Named(Upstream):
        async def stream_chat(self, path: str, body: dict[str, Any], **kw: Any):
            for event in NAMED_STREAMS[kind]:
                yield event

    sink, ticket = Sink(), Evicted()
    relay = Relay(sink, request(kind), dict, "req-1")
    await relay.forward(Named(), "m", 0, ticket, can_resume=True)  # type: ignore[arg-type]
    assert ticket.declined == len(NAMED_STREAMS[kind]) - 1  # after each event but the last
    assert sink.names[-1] in (b"response.completed", b"message_stop")
    assert relay.completion_tokens == 2


async def test_a_stream_queued_in_the_engine_gives_up_its_slot_without_waiting_to_run():
    """vLLM sends a queued stream nothing until it runs: the eviction must not wait for that
    (the backend takes one eviction at a time, so every other waiter would wait too)."""
    closed = asyncio.Event()

    class Queued(Upstream):
        async def stream_chat(self, path: str, body: dict[str, Any], **kw: Any):
            try:
                await asyncio.sleep(30)  # its turn in the engine's queue, never reached here
                yield b""
            finally:
                closed.set()  # the upstream request is closed: the engine drops it

    ticket = EvictedLater()
    relay = Relay(Sink(), request(), dict, "chatcmpl-3")
    forward = asyncio.ensure_future(relay.forward(Queued(), "m", 0, ticket, can_resume=True))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not forward.done()
    ticket.asked.set()
    with pytest.raises(Preempted):
        await asyncio.wait_for(forward, 5)
    assert closed.is_set() and relay.completion_tokens == 0


async def test_a_running_stream_gives_up_its_slot_without_waiting_for_its_next_token():
    """Looked at only between chunks, the eviction would wait for the victim's next token, and
    its abort would leave for the engine only then: the wait for the next chunk races it."""
    closed = asyncio.Event()

    class Slow(Upstream):
        async def stream_chat(self, path: str, body: dict[str, Any], **kw: Any):
            try:
                delta = {"role": "assistant", "content": "Once"}
                yield sse({"id": "u1", "choices": [{"index": 0, "delta": delta}]})
                await asyncio.sleep(30)  # the next step, never reached here
                yield b""
            finally:
                closed.set()

    sink, ticket = Sink(), EvictedLater()
    relay = Relay(sink, request(), dict, "chatcmpl-4")
    forward = asyncio.ensure_future(relay.forward(Slow(), "m", 0, ticket, can_resume=True))  # type: ignore[arg-type]
    while relay.completion_tokens < 1:
        await asyncio.sleep(0.01)
    ticket.asked.set()
    with pytest.raises(Preempted):
        await asyncio.wait_for(forward, 5)
    assert closed.is_set() and relay.completion_tokens == 1 and len(sink.events) == 1

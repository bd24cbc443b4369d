"""The relay gives up its slot only where that harms nobody: never once the answer has ended
(its finish reason or usage has arrived), since a continuation would then ask for more."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from llmserver.backends.kinds import profile
from llmserver.pipeline.relay import Relay
from llmserver.pipeline.resume import Preempted
from llmserver.wire.validation import CompletionRequest


class Evicted:
    """A ticket whose eviction was asked for from the start."""

    declined = 0
    evict_requested = True

    async def eviction(self) -> None:
        return None

    def decline_eviction(self) -> None:
        self.declined += 1


class Sink:
    needs_start = True
    embeds_events = False

    def __init__(self) -> None:
        self.events: list[bytes] = []

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None:
        return None

    async def queued(self, request_id: str, position: int, eta_s: float) -> None:
        return None

    async def event(self, payload: bytes) -> None:
        self.events.append(payload)

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


def request() -> CompletionRequest:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return CompletionRequest(
        kind="chat",
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

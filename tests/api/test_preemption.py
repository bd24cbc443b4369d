"""Making room: when every slot of the backend is busy with a power user's streams, a light
user's request that has waited past its tier's `preempt_after` pauses one of them (the power
user's newest stream started two of its jobs ahead of the light user's turn, more than the one
job's charge an eviction may cost); the paused stream continues later, and its client sees one
uninterrupted answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, token_text, tokenize
from tenants.models import ApiKey, AppType, Backend, Band, ModelRoute, Tenant, Tier
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for

POWER_TOKENS = 80
MESSAGES = [{"role": "user", "content": "Tell me something"}]


@pytest.fixture
def three_slots() -> Iterator[RunningSimulator]:
    sim = start_simulator("--max-num-seqs", "3", "--model", MODEL, "--speed", "4")
    yield sim
    sim.stop()


def make_world(sim: RunningSimulator, settings: Any, kind: str = "vllm", **tier: Any) -> Any:
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "SCRAPE_INTERVAL": 0.05,
        "USAGE_FLUSH_INTERVAL": 0.05,
    }
    values = dict(
        band=Band.INTERACTIVE,
        max_concurrent_per_user=16,
        max_queued_per_user=64,
        gate_max_waiting=1,
        gate_max_tpot_ms=None,
        preempt_after_ms=50.0,
    )
    chat = Tier.objects.create(name="chat", **{**values, **tier})
    tenant = Tenant.objects.create(name="Acme", slug="acme", default_tier=chat)
    backend = Backend.objects.create(
        name="narrow", base_url=sim.url, kind=kind, capacity=3, max_in_flight=3
    )
    ModelRoute.objects.create(public_name=MODEL, backend=backend)
    _, power = ApiKey.objects.create_key(tenant=tenant, user="power", app_type=AppType.CHAT)
    _, light = ApiKey.objects.create_key(tenant=tenant, user="light", app_type=AppType.CHAT)
    return power, light


@pytest.fixture
def vllm_world(transactional_db: None, three_slots: RunningSimulator, settings: Any) -> Any:
    return make_world(three_slots, settings)


@pytest.fixture(params=["vllm", "sglang"])
def resumable_world(transactional_db: None, settings: Any, request: Any) -> Iterator[Any]:
    """A backend of each kind whose server continues a final assistant message."""
    kind = request.param
    sim = start_simulator("--max-num-seqs", "3", "--model", MODEL, "--speed", "4", "--format", kind)
    try:
        yield make_world(sim, settings, kind=kind)
    finally:
        sim.stop()


@pytest.fixture
def pinned_world(transactional_db: None, three_slots: RunningSimulator, settings: Any) -> Any:
    return make_world(three_slots, settings, preemptible=False)


@pytest.fixture
def openai_world(transactional_db: None, three_slots: RunningSimulator, settings: Any) -> Any:
    return make_world(three_slots, settings, kind="openai")


@contextlib.asynccontextmanager
async def running_gateway() -> AsyncIterator[Any]:
    from llmserver.process import get_gateway, reset_gateway

    gw = await get_gateway()
    try:
        yield gw
    finally:
        await reset_gateway()


def events(body: bytes) -> list[dict[str, Any]]:
    lines = [x[6:] for x in body.decode().split("\n") if x.startswith("data: ")]
    return [json.loads(x) for x in lines if x != "[DONE]"]


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )


async def power_streams_running(gw: Any, keys: str, n: int) -> list[Any]:
    """`n` streams of the power user, each past its first token."""
    comms = [
        await start(
            keys,
            chat_body(
                max_tokens=POWER_TOKENS, stream_options={"include_usage": True}, messages=MESSAGES
            ),
        )
        for _ in range(n)
    ]
    for comm in comms:
        head = await comm.receive_output(30)
        assert head["status"] == 200
        await comm.receive_output(30)  # the first event
    return comms


async def rest_of(comm: Any) -> bytes:
    body = b""
    while True:
        message = await comm.receive_output(60)
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


UNINTERRUPTED = "".join(token_text(i) for i in range(1, POWER_TOKENS + 1))
PROMPT_TOKENS = len(tokenize(chat_prompt(MESSAGES)))


async def test_a_paused_stream_continues_as_one_answer_with_one_id_and_the_whole_usage(
    resumable_world,
):
    power_key, light_key = resumable_world
    async with running_gateway() as gw:
        await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
        power = await power_streams_running(gw, power_key, 3)
        light = await start(light_key, chat_body(max_tokens=4))
        status, _, light_body = await read_all(light, 30)
        assert status == 200 and text_of(events(light_body))
        bodies = await asyncio.gather(*(rest_of(c) for c in power))
        assert gw.scheduler.core.totals["preempted"] >= 1
        for body in bodies:
            # The first event was read before; it carried the role and no text.
            chunks = events(body)
            assert text_of(chunks) == UNINTERRUPTED
            assert len({c["id"] for c in chunks}) == 1
            usage = chunks[-1]["usage"]
            assert usage["prompt_tokens"] == PROMPT_TOKENS
            assert usage["completion_tokens"] == POWER_TOKENS
        await wait_for(lambda: gw.usage.pending == 0, 5)
        rows = [r for r in await usage_rows() if r["user"] == "power"]
        assert [(r["prompt_tokens"], r["completion_tokens"]) for r in rows] == [
            (PROMPT_TOKENS, POWER_TOKENS)
        ] * 3


async def test_a_non_preemptible_tier_is_never_paused(pinned_world):
    power_key, light_key = pinned_world
    async with running_gateway() as gw:
        await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
        power = await power_streams_running(gw, power_key, 3)
        light = await start(light_key, chat_body(max_tokens=4))
        await asyncio.gather(*(rest_of(c) for c in power))
        status, _, _ = await read_all(light, 30)
        assert status == 200
        assert gw.scheduler.core.totals["evicted"] == 0


async def test_a_backend_that_cannot_continue_a_message_keeps_a_started_stream(openai_world):
    power_key, light_key = openai_world
    async with running_gateway() as gw:
        power = await power_streams_running(gw, power_key, 3)
        light = await start(light_key, chat_body(max_tokens=4))
        await wait_for(lambda: gw.scheduler.core.totals["evicted"] >= 1, 10)
        bodies = await asyncio.gather(*(rest_of(c) for c in power))
        assert [text_of(events(b)) for b in bodies] == [UNINTERRUPTED] * 3
        assert gw.scheduler.core.totals["preempted"] == 0
        status, _, _ = await read_all(light, 30)
        assert status == 200


async def test_a_non_streamed_request_paused_before_its_answer_starts_again_whole(vllm_world):
    power_key, light_key = vllm_world
    async with running_gateway() as gw:
        await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
        body = chat_body(max_tokens=POWER_TOKENS, stream=False, messages=MESSAGES)
        power = [await start(power_key, body) for _ in range(3)]
        await wait_for(lambda: gw.snapshot().backends[0].in_flight == 3, 10)
        light = await start(light_key, chat_body(max_tokens=4))
        status, _, _ = await read_all(light, 30)
        assert status == 200
        answers = [json.loads((await read_all(c, 60))[2]) for c in power]
        assert gw.scheduler.core.totals["preempted"] >= 1
        for answer in answers:
            assert answer["choices"][0]["message"]["content"] == UNINTERRUPTED
            assert answer["usage"]["completion_tokens"] == POWER_TOKENS


async def test_a_paused_stream_whose_client_hangs_up_is_billed_what_it_received(vllm_world):
    power_key, light_key = vllm_world
    async with running_gateway() as gw:
        await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
        power = await power_streams_running(gw, power_key, 3)
        light = await start(light_key, chat_body(max_tokens=40))
        await wait_for(lambda: gw.scheduler.core.totals["preempted"] >= 1, 10)
        for comm in power:  # one of them is waiting to be resumed
            await comm.send_input({"type": "http.disconnect"})
        await wait_for(lambda: gw.usage.pending == 0 and not gw.inflight.tasks, 10)
        received = []
        for comm in power:
            body = b""
            while not comm.output_queue.empty():
                body += (await comm.receive_output(1)).get("body", b"")
            received.append(text_of(events(body)))
        rows = [r for r in await usage_rows() if r["user"] == "power"]
        assert sorted(r["completion_tokens"] for r in rows) == sorted(
            len(tokenize(text))
            for text in received  # the event read earlier had no text
        )
        assert {r["status"] for r in rows} == {"cancelled"}
        assert [q for q in gw.snapshot().queues if q.user == "power"] == []
        await read_all(light, 30)

"""Prefix-aware routing through the gateway: requests sharing a long prompt prefix, and the turns
of one conversation, go to the backend that already holds the prefix, even while it is busier
than the others; a backend publishing its KV cache events is credited with prefixes cached for
traffic the gateway never saw."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from scheduling import token_block_hashes
from simulator.launcher import RunningSimulator, free_port, start_simulator
from tenants.models import ApiKey, AppType, Backend, ModelRoute
from tests.api.conftest import MODEL, read_all, simulator_metric, start, usage_rows, wait_for

SYSTEM = "You answer questions about the Acme billing system, briefly and politely. " * 40


def token_blocks(gw: Any, req: Any, request_id: str) -> Any:
    """The gateway's keying of one validated request's prompt."""
    return gw.backends.prompts.token_blocks(req.model, req.kind, req.body, request_id)


@pytest.fixture(scope="module")
def more_simulators() -> Iterator[list[RunningSimulator]]:
    sims = [
        start_simulator("--max-num-seqs", "4", "--model", MODEL, "--speed", "10") for _ in range(2)
    ]
    yield sims
    for sim in sims:
        sim.stop()


@pytest.fixture
def pool(world: dict[str, Any], more_simulators: list[RunningSimulator]) -> dict[str, Any]:
    """Three backends behind one model, and a second user (bob) beside alice."""
    for i, sim in enumerate(more_simulators):
        backend = Backend.objects.create(name=f"sim-{i}", base_url=sim.url, kind="vllm")
        ModelRoute.objects.create(public_name=MODEL, backend=backend)
    _, bob = ApiKey.objects.create_key(tenant=world["tenant"], user="bob", app_type=AppType.CHAT)
    sims = {"sim": world["sim"], **{f"sim-{i}": s for i, s in enumerate(more_simulators)}}
    return {**world, "bob": bob, "sims": sims}


def body(messages: list[dict[str, str]], max_tokens: int = 4) -> bytes:
    return json.dumps(
        {"model": MODEL, "stream": True, "max_tokens": max_tokens, "messages": messages}
    ).encode()


def asking(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def in_flight(gw: Any) -> dict[str, int]:
    return {name: b.in_flight for name, b in gw.scheduler.core.backends.items()}


async def all_ready(gw: Any) -> None:
    await wait_for(lambda: all(b.gates[0].open for b in gw.snapshot().backends), 5.0)


async def a_long_request_on_one_backend(gw: Any, key: str, question: str) -> tuple[Any, str]:
    """A long streaming request, and the backend it runs on (the busiest from then on)."""
    comm = await start(key, body(asking(question), max_tokens=2000))
    await wait_for(lambda: sum(in_flight(gw).values()) == 1, 5.0)
    (home,) = [name for name, n in in_flight(gw).items() if n]
    return comm, home


async def hang_up(gw: Any, comm: Any) -> None:
    await comm.send_input({"type": "http.disconnect"})
    await wait_for(lambda: not any(in_flight(gw).values()), 5.0)


async def test_requests_sharing_a_long_prefix_go_to_the_backend_that_holds_it(
    pool: dict[str, Any],
) -> None:
    from llmserver.process import get_gateway, reset_gateway

    gw = await get_gateway()
    try:
        await all_ready(gw)
        first, home = await a_long_request_on_one_backend(gw, pool["alice"], "How do I pay?")
        status, _, _ = await read_all(await start(pool["bob"], body(asking("Any refund?"))))
        assert status == 200
        await hang_up(gw, first)
    finally:
        await reset_gateway()
    assert [row["backend"] for row in await usage_rows()] == [home, home]
    assert await simulator_metric(pool["sims"][home], "vllm:prefix_cache_hits_total") > 0


async def test_the_turns_of_a_conversation_follow_it_to_its_backend(
    pool: dict[str, Any],
) -> None:
    from llmserver.process import get_gateway, reset_gateway

    turn = [{"role": "system", "content": "Be exact. " * 60}, {"role": "user", "content": "Hi"}]
    gw = await get_gateway()
    try:
        await all_ready(gw)
        status, _, _ = await read_all(await start(pool["alice"], body(turn)))
        assert status == 200
        core = gw.scheduler.core
        (home,) = [name for name in core.backends if core.prefixes.size(name)]
        # Another user's long request, with another prefix, lands there too (an idle pool's
        # tie goes by name): the conversation's backend is now the busiest.
        other, busy = await a_long_request_on_one_backend(gw, pool["bob"], "Something else")
        assert busy == home
        turn += [
            {"role": "assistant", "content": "Hello! How can I help with your invoice today?"},
            {"role": "user", "content": "Explain my last invoice."},
        ]
        status, _, _ = await read_all(await start(pool["alice"], body(turn)))
        assert status == 200
        await hang_up(gw, other)
    finally:
        await reset_gateway()
    alice_rows = [r["backend"] for r in await usage_rows() if r["user"] == "alice"]
    assert alice_rows == [home, home]


@pytest.fixture(scope="module")
def publishing_simulator() -> Iterator[tuple[RunningSimulator, str]]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint}
    sim = start_simulator(
        *("--kv-events-config", json.dumps(config), "--model", MODEL, "--speed", "10")
    )
    yield sim, endpoint
    sim.stop()


@pytest.fixture
def publishing_pool(
    world: dict[str, Any], publishing_simulator: tuple[RunningSimulator, str]
) -> RunningSimulator:
    """sim, and sim-z publishing its KV cache events, behind one model."""
    sim, endpoint = publishing_simulator
    backend = Backend.objects.create(
        name="sim-z",
        base_url=sim.url,
        kind="vllm",
        kv_events_endpoint=endpoint,
        kv_events_bind=True,  # the simulator, as vLLM, connects to an endpoint without a wildcard
    )
    ModelRoute.objects.create(public_name=MODEL, backend=backend)
    return sim


async def test_a_prefix_cached_by_traffic_the_gateway_never_saw_draws_the_request(
    world: dict[str, Any], publishing_pool: RunningSimulator
) -> None:
    """Another client warmed sim-z's cache directly; its KV events say so. Without them the
    gateway would know nothing of it, and an idle pool's tie goes by name to sim."""
    from llmserver.process import get_gateway, reset_gateway

    sim = publishing_pool
    messages = asking("What is on my invoice?")
    gw = await get_gateway()
    try:
        await all_ready(gw)
        subscriber = gw.backends.kv_events["sim-z"][0]
        async with httpx.AsyncClient(base_url=sim.url) as direct:

            async def complete(chat: list[dict[str, str]]) -> None:
                warm = {"model": MODEL, "max_tokens": 1, "messages": chat}
                (await direct.post("/v1/chat/completions", json=warm)).raise_for_status()

            # ZeroMQ delivers only what is published once the subscriber has joined, and the
            # simulator publishes a block once: warm up with new prompts until one is heard.
            for i in range(50):
                if subscriber.received:
                    break
                await complete([{"role": "user", "content": f"Warm-up number {i}. " * 20}])
                await asyncio.sleep(0.1)
            heard_before = subscriber.received
            await complete(messages)
            await wait_for(lambda: subscriber.received > heard_before, 5.0)
        status, _, _ = await read_all(await start(world["alice"], body(messages)))
        assert status == 200
        exposition = gw.telemetry.metrics.render().decode()
    finally:
        await reset_gateway()
    assert [row["backend"] for row in await usage_rows()] == ["sim-z"]
    heard = 'llmserver_kv_event_batches_total{backend="sim-z",outcome="received"} '
    (line,) = [x for x in exposition.splitlines() if x.startswith(heard)]
    assert float(line.removeprefix(heard)) >= 1


@pytest.fixture
def dead_publisher_first(publishing_pool: RunningSimulator) -> RunningSimulator:
    """sim-a, first by name among the pool's publishers, that nothing answers for."""
    dead = Backend.objects.create(
        name="sim-a",
        base_url=f"http://127.0.0.1:{free_port()}",
        kind="vllm",
        kv_events_endpoint=f"tcp://127.0.0.1:{free_port()}",
    )
    ModelRoute.objects.create(public_name=MODEL, backend=dead)
    return publishing_pool


async def test_prompts_are_tokenized_by_the_next_publisher_while_the_first_one_is_down(
    dead_publisher_first: RunningSimulator,
) -> None:
    from llmserver.process import get_gateway, reset_gateway
    from llmserver.wire.validation import TokenLimits, validate

    data = {"model": MODEL, "messages": asking("Which plan am I on?"), "max_tokens": 4}
    req = validate("chat", data, TokenLimits(16, 4096))
    start = {"model": MODEL, "messages": data["messages"][:-1]}
    async with httpx.AsyncClient(base_url=dead_publisher_first.url) as direct:
        tokenized = (await direct.post("/tokenize", json=start)).json()["tokens"]
    gw = await get_gateway()
    try:
        assert await token_blocks(gw, req, "r1") is None  # sim-a refused the connection
        assert await token_blocks(gw, req, "r2") == token_block_hashes(tokenized)[:-1]
    finally:
        await reset_gateway()


async def test_a_chats_shared_start_is_tokenized_once(
    dead_publisher_first: RunningSimulator,
) -> None:
    """The system prompt's blocks come from memory for the next question: no round trip, so
    they are there even while no publisher answers."""
    from llmserver.process import get_gateway, reset_gateway
    from llmserver.wire.validation import TokenLimits, validate

    def chat(question: str) -> Any:
        data = {"model": MODEL, "messages": asking(question), "max_tokens": 4}
        return validate("chat", data, TokenLimits(16, 4096))

    gw = await get_gateway()
    try:
        await token_blocks(gw, chat("first"), "r1")  # sim-a is down: it rests from now on
        known = await token_blocks(gw, chat("second"), "r2")  # sim-z's answer, remembered
        assert known
        gw.backends.prompts.resting["sim-z"] = gw.clock() + 60  # nobody to ask any more
        assert await token_blocks(gw, chat("third"), "r3") == known
    finally:
        await reset_gateway()


@pytest.fixture
def silent_publisher(world: dict[str, Any]) -> Iterator[None]:
    """sim-s, publishing KV events, whose server takes connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    silent = Backend.objects.create(
        name="sim-s",
        base_url=f"http://127.0.0.1:{port}",
        kind="vllm",
        kv_events_endpoint=f"tcp://127.0.0.1:{free_port()}",
    )
    ModelRoute.objects.create(public_name=MODEL, backend=silent)
    yield
    listener.close()


async def test_a_client_that_leaves_while_its_prompt_is_tokenized_leaves_one_cancelled_row(
    world: dict[str, Any], silent_publisher: None
) -> None:
    from llmserver.process import get_gateway, reset_gateway

    gw = await get_gateway()
    try:
        comm = await start(world["alice"], body(asking("Where is my refund?")))
        await wait_for(lambda: len(gw.inflight.tasks) == 1, 5.0)
        await asyncio.sleep(0.3)  # admitted at once; /tokenize at sim-s never answers
        assert not gw.scheduler.core.entries  # not yet submitted: still tokenizing
        await comm.send_input({"type": "http.disconnect"})
        await wait_for(lambda: not gw.inflight.tasks, 5.0)
    finally:
        await reset_gateway()
    [row] = await usage_rows()
    assert (row["status"], row["completion_tokens"]) == ("cancelled", 0)

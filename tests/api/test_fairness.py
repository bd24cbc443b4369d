"""The product's promise on a small scale: a light user is not stuck behind a power user."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from simulator.launcher import RunningSimulator, start_simulator
from tenants.models import ApiKey, AppType, Backend, Band, ModelRoute, Tenant, Tier
from tests.api.conftest import MODEL, chat_body, start, wait_for


@pytest.fixture
def narrow_simulator() -> Iterator[RunningSimulator]:
    sim = start_simulator("--max-num-seqs", "2", "--model", MODEL, "--speed", "2")
    yield sim
    sim.stop()


@pytest.fixture
def two_users(transactional_db, narrow_simulator, settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "SCRAPE_INTERVAL": 0.05}
    tier = Tier.objects.create(
        name="chat",
        band=Band.INTERACTIVE,
        max_concurrent_per_user=16,
        max_queued_per_user=64,
        gate_max_waiting=1,
        gate_max_tpot_ms=None,
    )
    tenant = Tenant.objects.create(name="Acme", slug="acme", default_tier=tier)
    backend = Backend.objects.create(name="narrow", base_url=narrow_simulator.url, kind="vllm")
    ModelRoute.objects.create(public_name=MODEL, backend=backend)
    _, power = ApiKey.objects.create_key(tenant=tenant, user="power", app_type=AppType.CHAT)
    _, light = ApiKey.objects.create_key(tenant=tenant, user="light", app_type=AppType.CHAT)
    return power, light


async def first_token_at(comm) -> float:
    head = await comm.receive_output(60)
    assert head["status"] == 200
    await comm.receive_output(60)
    return time.monotonic()


async def test_a_light_users_request_starts_before_the_power_users_tenth(two_users):
    from llmserver.process import get_gateway, reset_gateway

    power_key, light_key = two_users
    gw = await get_gateway()
    try:
        await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
        power = [await start(power_key, chat_body(max_tokens=20)) for _ in range(12)]
        await wait_for(lambda: sum(q.depth for q in gw.snapshot().queues) >= 8, 5)
        light = await start(light_key, chat_body(max_tokens=20))
        times = await asyncio.gather(*(first_token_at(c) for c in [*power, light]))
        power_starts, light_start = sorted(times[:-1]), times[-1]
        assert light_start < power_starts[9]
    finally:
        await reset_gateway()

"""One backend crash is not a flood of errors: the first request that finds no server closes
the backend to every queued job at once; they wait, within their queue timeout, for it to come
back (or go to another backend of the pool) instead of each failing against it in turn."""

from __future__ import annotations

import asyncio
import json

from asgiref.sync import sync_to_async

from simulator.launcher import start_simulator
from tenants.models import Backend, Tier
from tests.api.conftest import MODEL, chat_body, read_all, start


def point_at(url: str) -> None:
    """The route's one backend, without metrics (gated by max_in_flight alone, so nothing but
    a failed request can tell the gateway it is down)."""
    Backend.objects.filter(name="sim").update(base_url=url, kind="openai")
    Tier.objects.update(max_concurrent_per_user=20, max_queued_per_user=20)


async def test_queued_requests_wait_for_a_restarted_backend_instead_of_failing(gateway, world):
    sim = start_simulator("--max-num-seqs", "4", "--model", MODEL, "--speed", "10")
    try:
        await sync_to_async(point_at)(sim.url)
        await gateway.reload_once()
        gateway.keys.clear()
        assert (await read_all(await start(world["alice"], chat_body(stream=False))))[0] == 200
        sim.stop()
        requests = [
            asyncio.ensure_future(
                read_all(await start(world["alice"], chat_body(stream=False)), timeout=30)
            )
            for _ in range(6)
        ]
        await asyncio.sleep(0.5)
        sim = await asyncio.to_thread(
            start_simulator, "--max-num-seqs", "4", "--model", MODEL, "--speed", "10",
            port=sim.port,
        )  # fmt: skip
        answers = await asyncio.gather(*requests)
    finally:
        sim.stop()
    assert [status for status, _, _ in answers] == [200] * 6
    assert all(json.loads(body)["usage"]["completion_tokens"] == 8 for _, _, body in answers)
    state = gateway.scheduler.core.backends["sim"]
    assert state.unreachable_until is None or state.in_flight == 0

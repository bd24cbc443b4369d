"""A quota holds under a burst: concurrent requests are counted from admission, not from when
their usage rows are written (ten at once against two per hour all succeeded)."""

from __future__ import annotations

import asyncio
import json

from asgiref.sync import sync_to_async

from simulator.launcher import free_port
from tenants.models import QuotaRule, Tier
from tests.api.conftest import chat_body, read_all, start, usage_rows


def two_per_day(world):
    Tier.objects.filter(pk=world["tier"].pk).update(
        max_concurrent_per_user=20, max_queued_per_user=20
    )
    QuotaRule.objects.create(tenant=world["tenant"], window="day", metric="requests", limit=2)


async def test_ten_concurrent_requests_against_a_quota_of_two_let_exactly_two_through(
    world, gateway
):
    await sync_to_async(two_per_day)(world)
    await gateway.reload_once()
    gateway.keys.clear()
    # One key lookup, not ten racing ones: SQLite's shared-cache test database refuses
    # concurrent readers of a table being written ("table is locked") where a file would wait.
    await gateway.keys.resolve(world["alice"])
    # Likewise the usage writer: its inserts would lock the table the quota checks read.
    gateway.usage.interval = 3600.0
    await asyncio.sleep(0.2)  # its current short sleep ends (nothing to write) before the burst
    comms = [await start(world["alice"], chat_body(max_tokens=2)) for _ in range(10)]
    results = await asyncio.gather(*(read_all(c, timeout=20) for c in comms))
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200, 200] + [429] * 8
    refusals = [json.loads(body)["error"]["code"] for status, _, body in results if status == 429]
    assert set(refusals) == {"quota_exceeded"}
    await gateway.usage.flush_once()
    assert await gateway.limits.holds.held() == 0
    ok = [r for r in await usage_rows() if r["status"] == "ok"]
    assert len(ok) == 2


async def test_the_reservation_ends_when_the_row_is_written_and_the_count_stays_right(
    world, gateway
):
    await sync_to_async(two_per_day)(world)
    await gateway.reload_once()
    gateway.keys.clear()
    for _ in range(2):
        status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
        assert status == 200
        await gateway.usage.flush_once()
    status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 429 and await gateway.limits.holds.held() == 0


async def test_a_quota_that_cannot_be_checked_refuses_with_503_rather_than_let_it_pass(
    world, settings
):
    from llmserver.process import get_gateway, reset_gateway

    await sync_to_async(two_per_day)(world)
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "RATE_LIMIT_REDIS_URL": f"redis://127.0.0.1:{free_port()}/4",  # nothing listens there
    }
    gw = await get_gateway()
    try:
        status, headers, body = await read_all(await start(world["alice"], chat_body()))
        assert (status, headers[b"retry-after"]) == (503, b"5")
        assert json.loads(body)["error"]["code"] == "limits_unavailable"
        await gw.usage.flush_once()
        rows = await usage_rows()
        assert [(r["status"], r["error_type"]) for r in rows] == [
            ("rejected", "limits_unavailable")
        ]
    finally:
        await reset_gateway()


async def test_a_client_that_leaves_mid_stream_ends_its_reservation_with_its_one_row(
    world, gateway
):
    await sync_to_async(two_per_day)(world)
    await gateway.reload_once()
    gateway.keys.clear()
    comm = await start(world["alice"], chat_body(max_tokens=500))
    assert (await comm.receive_output(10))["status"] == 200
    await comm.receive_output(10)  # the first event
    assert await gateway.limits.holds.held() == 1
    await comm.send_input({"type": "http.disconnect"})
    for _ in range(100):
        if gateway.usage.pending:
            break
        await asyncio.sleep(0.02)
    await gateway.usage.flush_once()
    assert await gateway.limits.holds.held() == 0
    assert [r["status"] for r in await usage_rows()] == ["cancelled"]

"""A request that never reached a backend costs nothing: a 429 (rate limit, quota, full queue), a
queue timeout or a request cancelled while still queued writes its one row, showing the refusal, with no tokens
and no cost, so it counts in no bill, budget or report."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from asgiref.sync import sync_to_async

from tenants.models import CostRule, QuotaRule, Tier
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for


def depth(gw) -> int:
    return sum(q.depth for q in gw.snapshot().queues)


def priced() -> None:
    CostRule.objects.create(
        model=MODEL,
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
        input_per_million=Decimal("1000"),
        output_per_million=Decimal("1000"),
    )


async def test_a_rate_limited_request_is_recorded_as_refused_with_no_tokens_and_no_cost(
    world, gateway
):
    await sync_to_async(priced)()
    await sync_to_async(Tier.objects.filter(pk=world["tier"].pk).update)(rpm_per_key=1)
    await gateway.reload_once()
    gateway.keys.clear()
    long_prompt = chat_body(messages=[{"role": "user", "content": "word " * 5000}])
    assert (await read_all(await start(world["alice"], chat_body())))[0] == 200
    assert (await read_all(await start(world["alice"], long_prompt)))[0] == 429
    await gateway.usage.flush_once()
    ok, refused = await usage_rows()
    assert ok["status"] == "ok" and Decimal(ok["cost"]) > 0
    assert (refused["status"], refused["error_type"]) == ("rejected", "rate_limit_exceeded")
    assert (refused["prompt_tokens"], refused["completion_tokens"]) == (0, 0)
    assert Decimal(refused["cost"]) == 0


async def test_a_quota_refusal_is_recorded_as_refused_with_no_tokens_and_no_cost(world, gateway):
    await sync_to_async(priced)()
    await sync_to_async(QuotaRule.objects.create)(
        tenant=world["tenant"], window="day", metric="requests", limit=1
    )
    await gateway.reload_once()
    gateway.keys.clear()
    long_prompt = chat_body(messages=[{"role": "user", "content": "word " * 5000}])
    assert (await read_all(await start(world["alice"], chat_body())))[0] == 200
    await gateway.usage.flush_once()
    assert (await read_all(await start(world["alice"], long_prompt)))[0] == 429
    await gateway.usage.flush_once()
    _, refused = await usage_rows()
    assert (refused["status"], refused["error_type"]) == ("rejected", "quota_exceeded")
    assert (refused["prompt_tokens"], refused["completion_tokens"]) == (0, 0)
    assert Decimal(refused["cost"]) == 0


async def test_a_queue_timeout_is_recorded_as_refused_with_no_tokens_and_no_cost(world, gateway):
    await sync_to_async(priced)()
    await sync_to_async(Tier.objects.filter(pk=world["tier"].pk).update)(queue_timeout_seconds=0.3)
    gateway.keys.clear()
    running = await start(world["alice"], chat_body(max_tokens=2000))  # ended by its hang-up
    assert (await running.receive_output(10))["status"] == 200
    long_prompt = chat_body(messages=[{"role": "user", "content": "word " * 5000}])
    assert (await read_all(await start(world["alice"], long_prompt)))[0] == 503
    await running.send_input({"type": "http.disconnect"})
    await wait_for(lambda: not gateway.inflight.tasks, 5)
    await gateway.usage.flush_once()
    [expired] = [r for r in await usage_rows() if r["error_type"] == "queue_timeout"]
    assert expired["status"] == "rejected"
    assert (expired["prompt_tokens"], expired["completion_tokens"]) == (0, 0)
    assert Decimal(expired["cost"]) == 0


async def test_a_request_cancelled_while_queued_costs_nothing(world, gateway):
    await sync_to_async(priced)()
    running = await start(world["alice"], chat_body(max_tokens=300))
    assert (await running.receive_output(10))["status"] == 200
    queued = await start(world["alice"], chat_body())
    await wait_for(lambda: depth(gateway) == 1, 5)
    await queued.send_input({"type": "http.disconnect"})
    await wait_for(lambda: depth(gateway) == 0, 5)
    await running.send_input({"type": "http.disconnect"})
    await wait_for(lambda: not gateway.inflight.tasks, 5)
    await gateway.usage.flush_once()
    never_sent = [r for r in await usage_rows() if r["dispatched_at"] is None]
    assert [(r["status"], r["prompt_tokens"], Decimal(r["cost"])) for r in never_sent] == [
        ("cancelled", 0, Decimal(0))
    ]

"""A monthly budget holds across gateway processes sharing reservations through Redis: a row one
process wrote and released counts in another's check at once, though that one's cached month
spend was read before the row (it hid the row for the cache's life: a burst spread over the
processes overshot by those seconds' spend)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from cluster_helpers import REDIS_URL, needs_redis
from django.utils import timezone
from redis.asyncio import Redis

from llmserver.pipeline.admission import check_limits
from llmserver.runtime import reservations
from llmserver.runtime.keys import KeyInfo, key_info
from llmserver.runtime.reservations import RedisReservations, Reservation
from tenants.budget import cache as spend_cache
from tenants.models import ApiKey, UsageRecord

pytestmark = needs_redis
BUDGET = Decimal("0.01")


def member(prefix: str) -> RedisReservations:
    """One gateway process's view of the shared reservations."""
    return RedisReservations(Redis.from_url(REDIS_URL), f"{prefix}:reservations:")


def alice_under_a_budget(cast: Any) -> KeyInfo:
    cast.acme.monthly_budget = BUDGET
    cast.acme.save()
    spend_cache.clear()  # this test process's cache stands for the second gateway's
    return key_info(ApiKey.objects.get(pk=cast.alice.pk))


def row_written(cast: Any, request_id: str, cost: Decimal) -> None:
    now = timezone.now()
    UsageRecord.objects.create(
        request_id=request_id,
        tenant=cast.acme,
        api_key=cast.alice,
        user="alice",
        model="llama",
        band=0,
        queued_at=now,
        finished_at=now,
        prompt_tokens=10,
        completion_tokens=10,
        cost=cost,
        status="ok",
    )


@pytest.fixture
def run() -> Iterator[Callable[[Awaitable[Any]], Any]]:
    """Redis calls on one event loop, the database's between them (outside any loop)."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


def verdict(
    run: Callable[[Awaitable[Any]], Any], members: RedisReservations, key: KeyInfo
) -> str | None:
    held = run(members.of_tenant(key.tenant_id))
    written = run(members.written_lately(key.tenant_id))
    refusal = check_limits(key, "llama", held, written).refusal
    return None if refusal is None else refusal.code


def test_a_row_another_process_wrote_counts_against_the_budget_at_once(
    cast: Any, prefix: str, run: Callable[[Awaitable[Any]], Any]
) -> None:
    key = alice_under_a_budget(cast)
    first, second = member(prefix), member(prefix)
    try:
        assert verdict(run, second, key) is None  # its cache reads the month: nothing yet
        run(first.hold("r1", Reservation(key.tenant_id, "alice", "llama", 20, key.key_id, BUDGET)))
        row_written(cast, "r1", BUDGET)
        run(first.release(["r1"]))
        assert verdict(run, second, key) == "budget_exceeded"
    finally:
        run(first.aclose())
        run(second.aclose())


def test_the_writer_does_not_count_its_own_row_twice(
    cast: Any, prefix: str, run: Callable[[Awaitable[Any]], Any]
) -> None:
    """Its own spend cache took the row as it wrote it (`SpendCache.add`)."""
    key = alice_under_a_budget(cast)
    only = member(prefix)
    try:
        half = Reservation(key.tenant_id, "alice", "llama", 20, key.key_id, BUDGET / 2)
        run(only.hold("r1", half))
        run(only.release(["r1"]))
        assert run(only.written_lately(key.tenant_id)) == ()
    finally:
        run(only.aclose())


def test_each_write_trims_what_no_process_can_still_miss(
    cast: Any, prefix: str, run: Callable[[Awaitable[Any]], Any], monkeypatch: Any
) -> None:
    """The written set holds the last `WRITTEN_KEPT_SECONDS` of rows, however long a tenant's
    traffic runs (it grew with every priced row while its expiry was renewed)."""
    key = alice_under_a_budget(cast)
    only, redis = member(prefix), Redis.from_url(REDIS_URL)
    clock = [1_000_000.0]
    monkeypatch.setattr(reservations, "time", SimpleNamespace(time=lambda: clock[0]))
    try:
        for n in range(3):
            spent = Reservation(key.tenant_id, "alice", "llama", 20, key.key_id, BUDGET / 10)
            run(only.hold(f"r{n}", spent))
            run(only.release([f"r{n}"]))
            clock[0] += reservations.WRITTEN_KEPT_SECONDS + 1
        assert run(redis.zcard(f"{prefix}:reservations:written:{key.tenant_id}")) == 1
    finally:
        run(only.aclose())
        run(redis.aclose())

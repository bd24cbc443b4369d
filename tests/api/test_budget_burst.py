"""A burst cannot overshoot a monthly budget: each admitted request holds what it may cost (its
prompt estimate and max_tokens at the price in force) until its usage row is written, and that
counts as spent, so concurrent requests overshoot by at most one request."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal

from asgiref.sync import sync_to_async

from tenants.models import CostRule, Tenant, Tier
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows

PER_REQUEST = Decimal("0.008")  # 8 completion tokens at 1000 per million, prompts free


def budget_of(world, amount: str) -> None:
    CostRule.objects.create(
        model=MODEL,
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
        input_per_million=Decimal(0),
        output_per_million=Decimal(1000),
    )
    Tenant.objects.filter(pk=world["tenant"].pk).update(monthly_budget=Decimal(amount))
    Tier.objects.filter(pk=world["tier"].pk).update(
        max_concurrent_per_user=20, max_queued_per_user=20
    )


async def test_twenty_concurrent_requests_spend_no_more_than_the_budget_and_one_request(
    gateway, world
):
    await sync_to_async(budget_of)(world, "0.02")
    await gateway.reload_once()
    gateway.keys.clear()
    sent = [await start(world["alice"], chat_body(stream=False)) for _ in range(20)]
    answers = await asyncio.gather(*(read_all(comm) for comm in sent))
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * 3 + [429] * 17
    await gateway.usage.flush_once()
    spent = sum(Decimal(r["cost"]) for r in await usage_rows())
    assert spent == 3 * PER_REQUEST <= Decimal("0.02") + PER_REQUEST

"""A tenant past its monthly budget is refused, or demoted to the batch band if its tier says so."""

from __future__ import annotations

import json
from decimal import Decimal

from asgiref.sync import sync_to_async
from django.utils import timezone

from tenants.models import UsageRecord
from tests.api.conftest import chat_body, read_all, start, usage_rows


def spend(world, amount: str) -> None:
    tenant = world["tenant"]
    tenant.monthly_budget = Decimal("1.00")
    tenant.save()
    now = timezone.now()
    UsageRecord.objects.create(
        request_id="old-spend",
        tenant=tenant,
        user="alice",
        model="demo-llama",
        band=0,
        queued_at=now,
        finished_at=now,
        status="ok",
        cost=Decimal(amount),
    )


async def test_a_tenant_past_its_budget_is_refused_with_a_429(gateway, world):
    await sync_to_async(spend)(world, "1.50")
    gateway.keys.clear()
    status, headers, body = await read_all(await start(world["alice"], chat_body()))
    assert status == 429 and int(headers[b"retry-after"]) >= 1
    assert json.loads(body)["error"]["code"] == "budget_exceeded"
    await gateway.usage.flush_once()
    refused = [r for r in await usage_rows() if r["request_id"] != "old-spend"]
    assert [(r["status"], r["error_type"]) for r in refused] == [("rejected", "budget_exceeded")]


async def test_a_tenant_within_its_budget_is_served(gateway, world):
    await sync_to_async(spend)(world, "0.50")
    gateway.keys.clear()
    status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 200


async def test_a_demoting_tier_sends_an_over_budget_tenant_to_the_batch_band(gateway, world):
    tier = world["tier"]
    tier.over_budget = "demote"
    await sync_to_async(tier.save)()
    await sync_to_async(spend)(world, "1.50")
    gateway.keys.clear()
    status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 200
    await gateway.usage.flush_once()
    [served] = [r for r in await usage_rows() if r["request_id"] != "old-spend"]
    assert (served["status"], served["band"]) == ("ok", 2)

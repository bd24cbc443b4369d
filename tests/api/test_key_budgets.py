"""A key's own monthly budget, beside its tenant's: past it, that key is refused and the
tenant's other keys are still served."""

from __future__ import annotations

import json
from decimal import Decimal

from asgiref.sync import sync_to_async
from django.utils import timezone

from tenants.models import ApiKey, AppType, UsageRecord
from tests.api.conftest import chat_body, read_all, start


def key_spent(world, budget: str, amount: str) -> str:
    """Give alice's key `budget`, book `amount` on it; returns bob's new key (no budget)."""
    alice = ApiKey.objects.get(tenant=world["tenant"], user="alice")
    alice.monthly_budget = Decimal(budget)
    alice.save()
    now = timezone.now()
    UsageRecord.objects.create(
        request_id="old-spend",
        tenant=world["tenant"],
        api_key=alice,
        user="alice",
        model="demo-llama",
        band=0,
        queued_at=now,
        finished_at=now,
        status="ok",
        cost=Decimal(amount),
    )
    _, bob = ApiKey.objects.create_key(tenant=world["tenant"], user="bob", app_type=AppType.CHAT)
    return bob


async def test_a_key_past_its_own_budget_is_refused_while_the_tenants_other_keys_are_served(
    gateway, world
):
    bob = await sync_to_async(key_spent)(world, "1.00", "1.50")
    gateway.keys.clear()
    status, headers, body = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 429 and int(headers[b"retry-after"]) >= 1
    error = json.loads(body)["error"]
    assert error["code"] == "budget_exceeded"
    assert "API key" in error["message"]
    status, _, _ = await read_all(await start(bob, chat_body(max_tokens=2)))
    assert status == 200


async def test_a_key_within_its_own_budget_is_served(gateway, world):
    await sync_to_async(key_spent)(world, "1.00", "0.50")
    gateway.keys.clear()
    status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 200

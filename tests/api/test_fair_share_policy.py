"""The cost unit and the token weights are the admin's fair-share policy: created on the first
start from the environment, then governing; a model's own w_in and w_out charge its jobs."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from tenants.models import CostRule, FairSharePolicy, ModelTokenWeights
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows


async def charged(gateway, key: str) -> tuple[float, dict]:
    """What one request of `key` charged its lane, and its usage row."""
    status, _, _ = await read_all(await start(key, chat_body(max_tokens=5)))
    assert status == 200
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    [lane] = gateway.scheduler.core.lanes.values()
    return lane.service, row


async def reload(gateway) -> None:
    await gateway.reload_once()


async def test_the_first_start_records_the_environments_unit_as_the_admins_policy(world, settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "COST_UNIT": "requests"}
    from llmserver.process import get_gateway, reset_gateway

    await get_gateway()
    try:
        policy = await sync_to_async(FairSharePolicy.objects.get)()
        assert policy.unit == "requests"
    finally:
        await reset_gateway()


async def test_the_admins_policy_governs_over_the_environment(world, gateway, settings):
    assert settings.LLMSERVER.get("COST_UNIT", "tokens") == "tokens"

    def to_money() -> None:
        FairSharePolicy.objects.update_or_create(pk=1, defaults={"unit": "money"})
        CostRule.objects.create(
            model=MODEL,
            input_per_million=Decimal("1000"),
            output_per_million=Decimal("4000"),
            effective_from=timezone.now() - timedelta(days=1),
        )

    await sync_to_async(to_money)()
    await reload(gateway)
    service, row = await charged(gateway, world["alice"])
    expected = (row["prompt_tokens"] * 1000 + row["completion_tokens"] * 4000) / 1_000_000
    assert service == pytest.approx(expected)


async def test_a_models_own_token_weights_charge_its_jobs(world, gateway):
    def weigh() -> None:
        policy, _ = FairSharePolicy.objects.get_or_create(pk=1)
        ModelTokenWeights.objects.create(
            policy=policy, model=MODEL, input_weight=2.0, output_weight=10.0
        )

    await sync_to_async(weigh)()
    await reload(gateway)
    service, row = await charged(gateway, world["alice"])
    assert service == pytest.approx(2.0 * row["prompt_tokens"] + 10.0 * row["completion_tokens"])


async def test_the_default_weights_charge_a_model_without_its_own(world, gateway):
    def weigh() -> None:
        FairSharePolicy.objects.update_or_create(
            pk=1, defaults={"unit": "tokens", "input_weight": 0.5, "output_weight": 3.0}
        )

    await sync_to_async(weigh)()
    await reload(gateway)
    service, row = await charged(gateway, world["alice"])
    assert service == pytest.approx(0.5 * row["prompt_tokens"] + 3.0 * row["completion_tokens"])


async def test_a_principals_answers_teach_the_estimate_that_orders_its_shortest_first(
    world, gateway
):
    from scheduling import Principal

    await charged(gateway, world["alice"])  # five tokens, max_tokens 5
    alice = Principal("acme", "alice")
    assert gateway.estimates.output_lengths.estimate(alice, MODEL, 4096) == 5

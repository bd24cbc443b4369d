"""The cost unit reaches the scheduler: in `money` a principal is charged its model's price in
force (it was charged 0, so fair share silently became round robin)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from llmserver.runtime.config import prices_in_force
from tenants.models import CostRule
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows


@pytest.fixture
def money(world, settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "COST_UNIT": "money"}
    now = timezone.now()
    CostRule.objects.create(
        model=MODEL,
        input_per_million=Decimal("1000"),
        output_per_million=Decimal("4000"),
        effective_from=now - timedelta(days=1),
    )
    return world


async def test_the_money_unit_charges_the_models_price_in_force(money, gateway):
    status, _, _ = await read_all(await start(money["alice"], chat_body(max_tokens=5)))
    assert status == 200
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    [lane] = gateway.scheduler.core.lanes.values()
    expected = (row["prompt_tokens"] * 1000 + row["completion_tokens"] * 4000) / 1_000_000
    assert lane.service == pytest.approx(expected)
    assert expected > 0


@pytest.mark.django_db
def test_the_price_in_force_is_the_latest_effective_one_else_the_default():
    now = timezone.now()
    CostRule.objects.create(
        model="*", input_per_million=1, output_per_million=2, effective_from=now - timedelta(1)
    )
    CostRule.objects.create(
        model="m", input_per_million=3, output_per_million=4, effective_from=now - timedelta(2)
    )
    CostRule.objects.create(
        model="m", input_per_million=5, output_per_million=6, effective_from=now - timedelta(1)
    )
    CostRule.objects.create(
        model="m", input_per_million=7, output_per_million=8, effective_from=now + timedelta(1)
    )
    assert prices_in_force(["m", "other"]) == {"m": (5.0, 6.0), "other": (1.0, 2.0)}

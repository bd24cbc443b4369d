"""Prices: a usage record is priced at the rule in force when it happened."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from tenants.models import CostRule

JAN = datetime(2026, 1, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def prices(db):
    CostRule.objects.create(
        model="llama", input_per_million=1, output_per_million=2, effective_from=JAN
    )
    CostRule.objects.create(
        model="llama", input_per_million=3, output_per_million=6, effective_from=MAR
    )
    CostRule.objects.create(
        model="*", input_per_million=10, output_per_million=10, effective_from=JAN
    )


def test_it_uses_the_price_in_force_at_that_moment(prices):
    assert (
        CostRule.objects.price_at("llama", datetime(2026, 2, 15, tzinfo=UTC)).input_per_million == 1
    )
    assert (
        CostRule.objects.price_at("llama", datetime(2026, 3, 2, tzinfo=UTC)).input_per_million == 3
    )


def test_a_price_takes_effect_at_its_exact_instant(prices):
    assert CostRule.objects.price_at("llama", MAR).input_per_million == 3


def test_it_falls_back_to_the_default_price_for_other_models(prices):
    assert CostRule.objects.price_at("mistral", MAR).input_per_million == 10


def test_there_is_no_price_before_the_first_rule(prices):
    assert CostRule.objects.price_at("llama", datetime(2025, 12, 31, tzinfo=UTC)) is None


def test_cost_is_tokens_times_price_per_million(prices):
    rule = CostRule.objects.price_at("llama", MAR)
    assert rule.cost(1_000_000, 500_000) == Decimal("6")

"""The cost rule for each unit."""

from __future__ import annotations

from scheduling import CostUnit, job_cost


def test_it_charges_one_per_request() -> None:
    assert job_cost(CostUnit.REQUESTS, 1000, 500) == 1.0


def test_it_charges_input_plus_weighted_output_tokens() -> None:
    assert job_cost("tokens", 100, 10, output_weight=4.0) == 140.0


def test_it_charges_money_per_million_tokens() -> None:
    assert job_cost(CostUnit.MONEY, 1_000_000, 500_000, price_in=2.0, price_out=8.0) == 6.0

"""Monthly budgets: spend across a price change, the tier's policy, and the short cache."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tenants import budget
from tenants.budget import SpendCache, budget_state
from tests.reports.usage_data import at, load, record


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    budget.cache.clear()


def test_it_sums_the_calendar_month_only(cast: Any) -> None:
    load(cast)
    cast.acme.monthly_budget = Decimal(1)
    state = budget_state(cast.acme, at(3, 15))
    assert state.spent == Decimal("0.025")  # r1..r6 plus r8; r0 was in February
    assert (state.exceeded, state.action) == (False, "allow")


def test_it_is_exceeded_at_the_budget_and_says_reject(cast: Any) -> None:
    load(cast)
    cast.acme.monthly_budget = Decimal("0.025")
    state = budget_state(cast.acme, at(3, 15))
    assert (state.exceeded, state.action) == (True, "reject")


def test_it_takes_the_policy_from_the_keys_tier(cast: Any) -> None:
    load(cast)
    cast.batch.over_budget = "demote"
    cast.acme.monthly_budget = Decimal("0.01")
    assert budget_state(cast.acme, at(3, 15), tier=cast.batch).action == "demote"


def test_it_is_never_exceeded_without_a_budget(cast: Any) -> None:
    load(cast)
    assert budget_state(cast.acme, at(3, 15)).exceeded is False


def test_it_caches_spend_for_a_few_seconds(cast: Any) -> None:
    now = [0.0]
    cache = SpendCache(ttl=5.0, clock=lambda: now[0])
    load(cast)
    assert cache.spent(cast.globex.pk, at(3, 15)) == Decimal("0.09")
    record("late", cast.globex, "charlie", "llama", at(3, 15), 1000, 0)
    now[0] = 4.9
    assert cache.spent(cast.globex.pk, at(3, 15)) == Decimal("0.09")
    now[0] = 5.0
    assert cache.spent(cast.globex.pk, at(3, 15)) == Decimal("0.093")


def test_a_read_that_straddles_a_row_this_process_wrote_is_not_kept(
    cast: Any, monkeypatch: Any
) -> None:
    """The row was added to the cached totals while the read ran, and the read may predate its
    commit: kept, the total would hide the row for the cache's life."""
    cache = SpendCache(ttl=5.0, clock=lambda: 0.0)
    load(cast)
    month_spend = budget.month_spend

    def read_as_a_row_is_written(*args: Any) -> Decimal:
        spent = month_spend(*args)  # before the row's commit
        record("late", cast.globex, "charlie", "llama", at(3, 15), 1000, 0)
        cache.add(cast.globex.pk, None, at(3, 15), Decimal("0.003"))
        return spent

    monkeypatch.setattr(budget, "month_spend", read_as_a_row_is_written)
    assert cache.spent(cast.globex.pk, at(3, 15)) == Decimal("0.09")
    monkeypatch.setattr(budget, "month_spend", month_spend)
    assert cache.spent(cast.globex.pk, at(3, 15)) == Decimal("0.093")

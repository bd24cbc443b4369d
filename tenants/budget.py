"""Monthly budgets: what a tenant, or one API key, spent this calendar month (UTC) against its
budget.

`budget_state` runs on the request path, so the month's spend is cached in-process for a few
seconds per tenant; the budget itself and the tier's policy are read from the objects passed in,
so an operator raising a budget takes effect at once. A tenant may overshoot by the traffic of
those few seconds plus the usage writer's batch delay: a bounded, documented slack.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Sum

from tenants.models import Tenant, Tier, UsageDaily
from tenants.models.rules import Window, window_end, window_start

CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class BudgetState:
    """`action` is `allow` within budget, else the tier's policy: `reject` or `demote`."""

    spent: Decimal
    budget: Decimal | None
    exceeded: bool
    action: str
    month_start: datetime
    month_end: datetime


def month_spend(tenant_id: int, now: datetime, key_id: int | None = None) -> Decimal:
    """The cost of the tenant (or of one of its keys) in the calendar month (UTC) containing
    `now`, summed in the database from the month's daily rows: a month is whole days."""
    rows = UsageDaily.objects.filter(
        tenant_id=tenant_id,
        day__gte=window_start(Window.MONTH, now).date(),
        day__lt=window_end(Window.MONTH, now).date(),
    )
    if key_id is not None:
        rows = rows.filter(key_id=key_id)
    return Decimal(rows.aggregate(total=Sum("cost"))["total"] or 0)


class SpendCache:
    """A tiny per-process cache of month spend, keyed by tenant, key (None: all) and month."""

    def __init__(self, ttl: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.clock = ttl, clock
        self._entries: dict[tuple[int, int | None, datetime], tuple[float, Decimal]] = {}
        self._lock = threading.Lock()

    def spent(self, tenant_id: int, now: datetime, key_id: int | None = None) -> Decimal:
        key = (tenant_id, key_id, window_start(Window.MONTH, now))
        at = self.clock()
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and at - hit[0] < self.ttl:
            return hit[1]
        value = month_spend(tenant_id, now, key_id)
        with self._lock:
            self._entries[key] = (at, value)
        return value

    def add(self, tenant_id: int, key_id: int | None, at: datetime, cost: Decimal) -> None:
        """A row this process has just written: cached totals of its month take it at once, so
        the reservation it replaces is not missed until the cache expires."""
        month = window_start(Window.MONTH, at)
        keys = {(tenant_id, None, month), (tenant_id, key_id, month)}
        with self._lock:
            for key in keys:
                hit = self._entries.get(key)
                if hit is not None:
                    self._entries[key] = (hit[0], hit[1] + cost)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


cache = SpendCache()


def budget_state(tenant: Tenant, now: datetime, tier: Tier | None = None) -> BudgetState:
    """Where `tenant` stands against its monthly budget; a blank budget is never exceeded.

    The policy comes from `tier` (the key's, when the caller has one), else the tenant's default.
    """
    policy = str((tier or tenant.default_tier).over_budget)
    return standing(tenant.pk, tenant.monthly_budget, policy, now)


def standing(
    tenant_id: int,
    budget: Decimal | None,
    policy: str,
    now: datetime,
    key_id: int | None = None,
    pending: Decimal = Decimal(0),
) -> BudgetState:
    """`budget_state` from plain values, for the request path (which holds them cached); with
    `key_id`, one key's spend against that key's own budget. `pending` is what requests
    admitted and not yet recorded may cost: counted as spent, so a burst cannot overshoot."""
    spent = cache.spent(tenant_id, now, key_id) + pending
    exceeded = budget is not None and spent >= budget
    action = policy if exceeded else "allow"
    return BudgetState(
        spent,
        budget,
        exceeded,
        action,
        window_start(Window.MONTH, now),
        window_end(Window.MONTH, now),
    )

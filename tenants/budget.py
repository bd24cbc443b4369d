"""Monthly budgets: what a tenant, or one API key, spent this calendar month (UTC) against its
budget.

`budget_state` runs on the request path, so the month's spend is cached in-process for a few
seconds per tenant; the budget itself and the tier's policy are read from the objects passed in,
so an operator raising a budget takes effect at once. What a cached spend cannot know yet is
added by the caller: requests admitted and not yet recorded (`pending`), and rows other
processes wrote since it was read (`written`, from the shared reservations).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
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
    """A tiny per-process cache of month spend, keyed by tenant, key (None: all) and month.
    Each value remembers when (wall clock) it was read from the database, so rows written by
    other processes since can be added to it (`standing`'s `written`)."""

    def __init__(
        self,
        ttl: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.ttl, self.clock, self.wall = ttl, clock, wall
        self._entries: dict[tuple[int, int | None, datetime], tuple[float, Decimal, float]] = {}
        self._lock = threading.Lock()
        self._adds = 0  # rows this process added, for reads that straddle one

    def spent(self, tenant_id: int, now: datetime, key_id: int | None = None) -> Decimal:
        return self.read(tenant_id, now, key_id)[0]

    def read(
        self, tenant_id: int, now: datetime, key_id: int | None = None
    ) -> tuple[Decimal, float]:
        """The month's spend, and the wall-clock time it was read from the database (taken
        before the query: a row committed during it may be counted twice, never missed)."""
        key = (tenant_id, key_id, window_start(Window.MONTH, now))
        at = self.clock()
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and at - hit[0] < self.ttl:
            return hit[1], hit[2]
        read_at, adds = self.wall(), self._adds
        value = month_spend(tenant_id, now, key_id)
        with self._lock:
            # A row this process added meanwhile may be missing from what was read: kept, the
            # total would hide it for the cache's life.
            if self._adds == adds:
                self._entries[key] = (at, value, read_at)
        return value, read_at

    def add(self, tenant_id: int, key_id: int | None, at: datetime, cost: Decimal) -> None:
        """A row this process has just written: cached totals of its month take it at once, so
        the reservation it replaces is not missed until the cache expires."""
        month = window_start(Window.MONTH, at)
        keys = {(tenant_id, None, month), (tenant_id, key_id, month)}
        with self._lock:
            self._adds += 1
            for key in keys:
                hit = self._entries.get(key)
                if hit is not None:
                    self._entries[key] = (hit[0], hit[1] + cost, hit[2])

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
    written: Iterable[tuple[float, Decimal]] = (),
) -> BudgetState:
    """`budget_state` from plain values, for the request path (which holds them cached); with
    `key_id`, one key's spend against that key's own budget. `pending` is what requests
    admitted and not yet recorded may cost: counted as spent, so a burst cannot overshoot.
    `written` is (when, cost) of rows other processes wrote lately: counted unless the cached
    spend was read after, so another process's cache cannot hide them for its few seconds."""
    recorded, read_at = cache.read(tenant_id, now, key_id)
    spent = recorded + pending + sum((c for at, c in written if at >= read_at), Decimal(0))
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

"""What this process admitted and has not yet written as a usage row.

Quota counts usage rows, and a row is written up to a flush interval after its request ends; a
burst of concurrent requests would all pass a check that reads the database alone (ten against
a quota of two all succeeded). Each admitted request holds a reservation from admission until its
usage row is written, and a quota check adds what is reserved to what is recorded. Admission for
one tenant is serialised (`lock`), so two checks cannot both see the last unit as free.

In process only: several gateway processes need the shared store of the scale-out work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal

from tenants.models import Metric, QuotaRule


@dataclass(frozen=True, slots=True)
class Reservation:
    tenant_id: int
    user: str
    model: str
    tokens: int  # the estimate at admission: prompt + max_tokens


class Reservations:
    def __init__(self) -> None:
        self._held: dict[str, Reservation] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def lock(self, tenant_id: int) -> asyncio.Lock:
        return self._locks.setdefault(tenant_id, asyncio.Lock())

    def hold(self, request_id: str, reservation: Reservation) -> None:
        self._held[request_id] = reservation

    def release(self, request_ids: Iterable[str]) -> None:
        """Their usage rows are written (or dropped): the database counts them now."""
        for request_id in request_ids:
            self._held.pop(request_id, None)

    def of_tenant(self, tenant_id: int) -> tuple[Reservation, ...]:
        """A copy, taken on the event loop, for a check that runs on a worker thread."""
        return tuple(r for r in self._held.values() if r.tenant_id == tenant_id)

    def __len__(self) -> int:
        return len(self._held)


def pending(held: tuple[Reservation, ...], user: str) -> Callable[[QuotaRule], Decimal]:
    """What `held` adds to each quota rule for `user`'s request; money is not estimated (a row
    has no price until it is written)."""

    def amount(rule: QuotaRule) -> Decimal:
        total = Decimal(0)
        for r in held:
            if rule.per_user and r.user != user:
                continue
            if not rule.matches(r.model):
                continue
            if rule.metric == Metric.REQUESTS:
                total += 1
            elif rule.metric == Metric.TOKENS:
                total += r.tokens
        return total

    return amount

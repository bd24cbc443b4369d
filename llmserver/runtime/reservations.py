"""What the gateway admitted and has not yet written as a usage row.

Quota counts usage rows, and a row is written up to a flush interval after its request ends; a
burst of concurrent requests would all pass a check that reads the database alone (ten against
a quota of two all succeeded). Each admitted request holds a reservation from admission until its
usage row is written, and a quota check adds what is reserved to what is recorded. Admission for
one tenant is serialised (`guard`), so two checks cannot both see the last unit as free.

One small interface, two homes, as the rate-limit windows have: `InProcessReservations` (the
default, one gateway process) and `RedisReservations` (when REDIS_URL is set), where the held
reservations of every process are one hash per tenant and the guard is a lease-style lock, so a
burst spread over several processes cannot overshoot a quota either. A process that dies takes
its reservations with it: each entry names its owner, whose liveness key expires unless renewed.

Budgets read a month's spend through a per-process cache (tenants/budget.py, a few seconds):
a row written and its reservation released by one process would be missed by another's cache
until it expired, so across processes a burst could overshoot by those seconds' spend. So a
released reservation stays in Redis as `written` (its held cost and when its row was
written) for twice the cache's life, and every other process adds it to a
cached spend read before it (`written_lately`). The writer's own cache took the row at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from llmserver.cluster.lease import RELEASE
from tenants.budget import CACHE_SECONDS
from tenants.models import Metric, QuotaRule

# How long a dead process's reservations keep counting, and how long a crashed admission can
# hold a tenant's guard; both are renewed or released long before this by a live process.
OWNER_TTL_SECONDS = 15.0
GUARD_TTL_SECONDS = 10.0
# How long a written reservation is kept for other processes' spend caches: past their life.
WRITTEN_KEPT_SECONDS = 2 * CACHE_SECONDS


@dataclass(frozen=True, slots=True)
class Reservation:
    tenant_id: int
    user: str
    model: str
    tokens: int  # the estimate at admission: prompt + max_tokens
    key_id: int | None = None
    # The most it can cost at the price in force (the prompt estimate and max_tokens), held
    # against the tenant's and the key's monthly budgets until its usage row is written.
    cost: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class Written:
    """A reservation another process released when it wrote its row: what it was held for (the
    most the row can cost) and when (wall clock, seconds)."""

    key_id: int | None
    cost: Decimal
    at: float


class Reservations(Protocol):
    def guard(self, tenant_id: int) -> contextlib.AbstractAsyncContextManager[None]:
        """Admission for `tenant_id` alone, among every process sharing these reservations."""
        ...

    async def of_tenant(self, tenant_id: int) -> tuple[Reservation, ...]: ...

    async def written_lately(self, tenant_id: int) -> tuple[Written, ...]:
        """What other processes released lately, for a budget read through a stale cache."""
        ...

    async def hold(self, request_id: str, reservation: Reservation) -> None: ...

    async def release(self, request_ids: Iterable[str]) -> None:
        """Their usage rows are written (or dropped): the database counts them now."""
        ...

    async def held(self) -> int:
        """How many this process holds."""
        ...

    async def run(self) -> None:
        """Keep this process's reservations alive, where they can outlive it."""
        ...

    async def aclose(self) -> None: ...


class InProcessReservations:
    def __init__(self) -> None:
        self._held: dict[str, Reservation] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def guard(self, tenant_id: int) -> contextlib.AbstractAsyncContextManager[None]:
        return self._locks.setdefault(tenant_id, asyncio.Lock())

    async def of_tenant(self, tenant_id: int) -> tuple[Reservation, ...]:
        return tuple(r for r in self._held.values() if r.tenant_id == tenant_id)

    async def written_lately(self, tenant_id: int) -> tuple[Written, ...]:
        """None: this process's own spend cache takes each row it writes."""
        return ()

    async def hold(self, request_id: str, reservation: Reservation) -> None:
        self._held[request_id] = reservation

    async def release(self, request_ids: Iterable[str]) -> None:
        for request_id in request_ids:
            self._held.pop(request_id, None)

    async def held(self) -> int:
        return len(self._held)

    async def run(self) -> None:
        """Nothing to renew: the reservations live and die with this process."""

    async def aclose(self) -> None:
        """Nothing to release."""


_Scored = list[tuple[bytes, float]]  # ZRANGEBYSCORE ... WITHSCORES


class RedisReservations:
    """Every process's reservations in Redis under `prefix`: `held:<tenant>` hashes of
    request id -> JSON [owner, user, tokens, model, key id, cost], `written:<tenant>` sorted sets
    of JSON [owner, key id, cost, request id] scored by when the row was written,
    `guard:<tenant>` locks, `owner:<id>` liveness."""

    def __init__(
        self,
        client: Redis,
        prefix: str,
        owner_ttl: float = OWNER_TTL_SECONDS,
        guard_ttl: float = GUARD_TTL_SECONDS,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._owner = uuid.uuid4().hex
        self._owner_ttl_ms = int(owner_ttl * 1000)
        self._guard_ttl_ms = int(guard_ttl * 1000)
        # The guard is released as a lease is: deleted only if still held by this token.
        self._unlock = client.register_script(RELEASE)
        self._mine: dict[str, Reservation] = {}  # what this process holds, by request id
        # Released here, not yet moved to `written:` in Redis: the reservation, and when.
        self._written: dict[str, tuple[Reservation, float]] = {}

    @contextlib.asynccontextmanager
    async def guard(self, tenant_id: int) -> AsyncIterator[None]:
        key, token = f"{self._prefix}guard:{tenant_id}", uuid.uuid4().hex
        delay, deadline = 0.001, time.monotonic() + self._guard_ttl_ms / 1000 * 2
        while not await self._client.set(key, token, nx=True, px=self._guard_ttl_ms):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the admission guard of tenant {tenant_id} stays taken")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        try:
            yield
        finally:
            await self._unlock(keys=[key], args=[token])

    async def of_tenant(self, tenant_id: int) -> tuple[Reservation, ...]:
        """The live ones; a dead owner's entries are deleted on the way."""
        key = f"{self._prefix}held:{tenant_id}"
        raw = await self._client.hgetall(key)
        entries = {_text(rid): json.loads(value) for rid, value in raw.items()}
        owners = sorted({owner for owner, *_ in entries.values()})
        found = await self._client.mget([self._owner_key(o) for o in owners]) if owners else []
        alive = dict(zip(owners, found, strict=True))
        dead = [rid for rid, (owner, *_) in entries.items() if alive[owner] is None]
        if dead:
            await self._client.hdel(key, *dead)
        return tuple(
            Reservation(tenant_id, e[1], e[3], int(e[2]), *_budget_part(e[4:]))
            for e in entries.values()
            if alive[e[0]] is not None
        )

    async def hold(self, request_id: str, reservation: Reservation) -> None:
        r = reservation
        value = json.dumps([self._owner, r.user, r.tokens, r.model, r.key_id, str(r.cost)])
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.set(self._owner_key(self._owner), b"1", px=self._owner_ttl_ms)
            pipe.hset(f"{self._prefix}held:{r.tenant_id}", request_id, value)
            await pipe.execute()
        self._mine[request_id] = r

    async def written_lately(self, tenant_id: int) -> tuple[Written, ...]:
        """Other processes' written reservations of the last `WRITTEN_KEPT_SECONDS` (each write
        trims the older ones: the set holds seconds of rows, whatever the traffic)."""
        old = time.time() - WRITTEN_KEPT_SECONDS
        raw = await self._client.zrangebyscore(
            f"{self._prefix}written:{tenant_id}", old, "+inf", withscores=True
        )
        entries = [(json.loads(member), float(at)) for member, at in cast(_Scored, raw)]
        return tuple(
            Written(None if key_id is None else int(key_id), Decimal(cost), float(at))
            for (owner, key_id, cost, _), at in entries
            if owner != self._owner
        )

    async def release(self, request_ids: Iterable[str]) -> None:
        """Raises RedisError if Redis cannot take it now; the moves are retried by `run`
        (meanwhile the entries over-count, never under-count, and this process stays their
        live owner)."""
        now = time.time()
        for request_id in request_ids:
            reservation = self._mine.pop(request_id, None)
            if reservation is not None:
                self._written[request_id] = (reservation, now)
        await self._move_written()

    async def _move_written(self) -> None:
        """From `held:` to `written:`, in one transaction: no other process's check sees the
        reservation in neither."""
        if not self._written:
            return
        done = dict(self._written)
        by_tenant: dict[int, dict[str, tuple[str, float] | None]] = {}
        for request_id, (r, at) in done.items():
            # Only what a budget counts is kept: a reservation of no cost is just deleted.
            entry = (json.dumps([self._owner, r.key_id, str(r.cost), request_id]), at)
            by_tenant.setdefault(r.tenant_id, {})[request_id] = entry if r.cost else None
        oldest = time.time() - WRITTEN_KEPT_SECONDS
        async with self._client.pipeline(transaction=True) as pipe:
            for tenant_id, entries in by_tenant.items():
                pipe.hdel(f"{self._prefix}held:{tenant_id}", *entries)
                kept = dict(entry for entry in entries.values() if entry is not None)
                if kept:
                    written = f"{self._prefix}written:{tenant_id}"
                    pipe.zadd(written, kept)
                    pipe.zremrangebyscore(written, "-inf", oldest)
                    pipe.pexpire(written, int(WRITTEN_KEPT_SECONDS * 1000))
            await pipe.execute()
        for request_id in done:
            self._written.pop(request_id, None)

    async def held(self) -> int:
        return len(self._mine)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._owner_ttl_ms / 1000 / 3)
            # A Redis outage is the admissions' to report (503); both resume after it.
            with contextlib.suppress(RedisError):
                await self._move_written()
            if self._mine:
                with contextlib.suppress(RedisError):
                    await self._client.set(
                        self._owner_key(self._owner), b"1", px=self._owner_ttl_ms
                    )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _owner_key(self, owner: str) -> str:
        return f"{self._prefix}owner:{owner}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def reservations(redis_url: str, prefix: str) -> Reservations:
    """Redis when a URL is configured (shared by every gateway process), else memory."""
    if redis_url:
        return RedisReservations(Redis.from_url(redis_url), prefix)
    return InProcessReservations()


def _budget_part(rest: list[Any]) -> tuple[int | None, Decimal]:
    """The key id and cost of an entry (absent from one written before they were held)."""
    if len(rest) < 2:
        return None, Decimal(0)
    return (None if rest[0] is None else int(rest[0])), Decimal(str(rest[1]))


def held_cost(held: tuple[Reservation, ...], key_id: int | None = None) -> Decimal:
    """What the requests admitted and not yet recorded may cost: all of the tenant's, or with
    `key_id`, that key's."""
    return sum((r.cost for r in held if key_id is None or r.key_id == key_id), Decimal(0))


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

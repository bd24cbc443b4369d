"""Quota reservations shared through Redis: what one process holds, another's check counts."""

from __future__ import annotations

import asyncio

from cluster_helpers import REDIS_URL, needs_redis
from redis.asyncio import Redis

from llmserver.runtime.reservations import RedisReservations, Reservation

pytestmark = needs_redis


def member(prefix: str, owner_ttl: float = 15.0) -> RedisReservations:
    return RedisReservations(Redis.from_url(REDIS_URL), f"{prefix}:reservations:", owner_ttl)


async def test_what_one_process_holds_counts_in_anothers_check(prefix: str) -> None:
    one, two = member(prefix), member(prefix)
    try:
        await one.hold("r1", Reservation(7, "alice", "llama", 40))
        assert await two.of_tenant(7) == (Reservation(7, "alice", "llama", 40),)
        assert await two.of_tenant(8) == ()
        await one.release(["r1"])
        assert await two.of_tenant(7) == ()
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_dead_processs_reservations_stop_counting_when_its_liveness_lapses(
    prefix: str,
) -> None:
    dead, alive = member(prefix, owner_ttl=0.2), member(prefix)
    try:
        await dead.hold("r1", Reservation(7, "alice", "llama", 40))
        await alive.hold("r2", Reservation(7, "bob", "llama", 10))
        await asyncio.sleep(0.4)  # `dead` never renews: its process is gone
        assert await alive.of_tenant(7) == (Reservation(7, "bob", "llama", 10),)
    finally:
        await dead.aclose()
        await alive.aclose()


async def test_the_guard_admits_one_process_at_a_time_per_tenant(prefix: str) -> None:
    one, two = member(prefix), member(prefix)
    inside: list[str] = []
    overlaps: list[int] = []

    async def admit(members: RedisReservations, name: str) -> None:
        async with members.guard(7):
            inside.append(name)
            overlaps.append(len(inside))
            await asyncio.sleep(0.02)
            inside.remove(name)

    try:
        await asyncio.gather(*(admit(m, f"{i}") for i, m in enumerate([one, two] * 4)))
        assert overlaps == [1] * 8
        async with one.guard(8), two.guard(9):  # other tenants do not wait
            pass
    finally:
        await one.aclose()
        await two.aclose()

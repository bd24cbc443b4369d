"""Quota reservations shared through Redis: what one process holds, another's check counts."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest
from cluster_helpers import REDIS_URL, needs_redis
from cluster_proxy import CuttableProxy
from redis.asyncio import Redis
from redis.exceptions import RedisError

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


async def test_a_release_that_redis_missed_is_retried_once_it_answers(prefix: str) -> None:
    target = urlsplit(REDIS_URL)
    proxy = CuttableProxy(target.hostname or "127.0.0.1", target.port or 6379)
    await proxy.start()
    cut_off = RedisReservations(
        Redis.from_url(f"redis://127.0.0.1:{proxy.port}{target.path}"),
        f"{prefix}:reservations:",
        owner_ttl=0.3,  # `run` retries every 0.1 s
    )
    other = member(prefix)
    runner = asyncio.ensure_future(cut_off.run())
    try:
        await cut_off.hold("r1", Reservation(7, "alice", "llama", 40))
        await cut_off.hold("r2", Reservation(7, "bob", "llama", 10))  # still running
        await proxy.cut()
        with pytest.raises(RedisError):
            await cut_off.release(["r1"])
        await proxy.start()
        for _ in range(100):
            if await other.of_tenant(7) == (Reservation(7, "bob", "llama", 10),):
                break
            await asyncio.sleep(0.05)
        assert await other.of_tenant(7) == (Reservation(7, "bob", "llama", 10),)
    finally:
        runner.cancel()
        await proxy.cut()
        await cut_off.aclose()
        await other.aclose()

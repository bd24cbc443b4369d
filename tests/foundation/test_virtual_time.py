"""The virtual-time loop the simulator's calibration runs on: its clock moves by the waits it
skips, in the order the timers were due."""

from __future__ import annotations

import asyncio

from llmserver.testing.virtual_time import run_in_virtual_time


def test_a_sleep_moves_the_virtual_clock_by_its_length():
    async def sleep_a_minute() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(60.0)
        return loop.time() - start

    assert run_in_virtual_time(sleep_a_minute()) == 60.0


def test_sleepers_wake_in_the_order_their_timers_fall_due():
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        woke.append((name, asyncio.get_running_loop().time()))

    async def both() -> None:
        await asyncio.gather(sleeper("late", 2.5), sleeper("early", 0.5))

    run_in_virtual_time(both())
    assert woke == [("early", 0.5), ("late", 2.5)]
